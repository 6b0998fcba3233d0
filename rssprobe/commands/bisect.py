"""rssprobe bisect: which version, which patch component, or which commit moved a figure.

  bisect SCENARIO --deepspeed V1,V2,... [--torch T] --metric M   binary search over ordered versions
  bisect SCENARIO --components SET --metric M                    delta debugging over a patch set
  bisect SCENARIO --deepspeed-src PATH --good REV --bad REV      `git bisect run` over commits
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..campaign.bisect.rounds import DEFAULT_METRIC
from ..campaign.bisect.start import BisectRequest, bisect
from ..contract.glibc import STEADY_MALLOC_ENV
from ..reporters import output, show
from . import common_args
from .common_args import format_option, fresh_option, malloc_env_option, pip_flags, python_options, scenario_sets


@click.command("bisect", epilog=common_args.examples(
    "rssprobe bisect default --deepspeed 0.16.5,0.16.9,0.17.0,0.18.2 --metric role.h2d_staging",
    "rssprobe bisect default --components pr8132 --metric first_step.rss --repeat 5",
    "rssprobe bisect default --deepspeed-src ~/DeepSpeed --good v0.18.0 --bad HEAD"))
@common_args.script_options
@click.option("--deepspeed", "ds_list", metavar="V,V,...", help="Ordered DeepSpeed versions to search.")
@click.option("--torch", "torch_list", metavar="V[,V...]", help="Ordered torch versions, or the one torch to use.")
@click.option("--transformers", "tf_list", metavar="V,V,...",
              help="Ordered transformers releases or local-clone revisions PATH@REV, or the one to use.")
@click.option("--accelerate", "acc_list", metavar="V,V,...", help="Ordered accelerate releases, or the one to use.")
@click.option("--components", metavar="SET|A,B,...", help="Delta-debug the components of a patch set.")
@click.option("--deepspeed-src", type=click.Path(path_type=Path, file_okay=False), help="A DeepSpeed git checkout.")
@click.option("--good", help="With --deepspeed-src: a revision without the change.")
@click.option("--bad", help="With --deepspeed-src: a revision with the change.")
@click.option("--limits", type=click.Path(path_type=Path, dir_okay=False), help="With --deepspeed-src: ceilings TOML.")
@click.option("--limit", type=common_args.FiniteRange(min=0),
              help="With --deepspeed-src: a ceiling for --metric (B/param).")
@click.option("--metric", default=DEFAULT_METRIC, show_default=True,
              help="The one figure the search follows (a name from `show --format json`, 'metrics').")
@click.option("--direction", type=click.Choice(["up", "down", "auto"]), default="up", show_default=True,
              help="Versions: which way is bad (auto: the way the last version moved; it is probed first). "
                   "Components: always the way the full set moved.")
@common_args.repeat_option(3, "per probe and round")
@click.option("--retries", default=3, show_default=True, type=click.IntRange(0),
              help="Extra rounds for an undecided probe before it is skipped.")
@common_args.threshold_option()
@common_args.alpha_option()
@scenario_sets
@click.option("--out", type=click.Path(path_type=Path), help="Directory for the runs (default reports/bisect/...).")
@fresh_option
@click.option("--keep-envs", is_flag=True, help="With --deepspeed-src: keep the per-revision environments.")
@malloc_env_option(common_args.STEADY_HELP)
@python_options
@pip_flags
@format_option()
def command(args: tuple[str, ...], script: Path | None, ds_list: str | None, torch_list: str | None,
            tf_list: str | None, acc_list: str | None, components: str | None,
            deepspeed_src: Path | None, good: str | None, bad: str | None, limits: Path | None, limit: float | None,
            metric: str, direction: str, repeat: int, retries: int, threshold: float, alpha: float,
            steps: int | None, overrides: tuple[str, ...], out: Path | None, fresh: bool, keep_envs: bool,
            malloc_env: tuple[str, ...], env_ref: str | None, python: str | None, find_links: tuple[str, ...],
            index_url: str | None, fmt: str) -> None:
    """Find what moved METRIC: a version, a patch component, or a commit (SCENARIO may be --script PATH -- ARGS)."""
    spec = common_args.scenario_spec(args, script, overrides, steps=steps)
    assert spec is not None
    outcome = bisect(BisectRequest(
        # the axes as typed: parsed strictly, once, by the bisect (run/envs/spec.axis_values)
        spec=spec, deepspeed=_given(ds_list), torch=_given(torch_list), transformers=_given(tf_list),
        accelerate=_given(acc_list),
        components=components, deepspeed_src=deepspeed_src, good=good, bad=bad, limits=limits, limit=limit,
        metric=metric, direction=direction, retries=retries, threshold=threshold, alpha=alpha,
        out=out, fresh=fresh, keep_envs=keep_envs,
        options=common_args.run_options(malloc_env=malloc_env, malloc_default=STEADY_MALLOC_ENV, repeat=repeat,
                                        env_ref=env_ref, python=python),
        pip=common_args.pip_options(find_links, index_url)))
    output.render(fmt, show.bisect(outcome.data, fmt))
    sys.exit(outcome.exit_code)


def _given(text: str | None) -> list[str]:
    return [] if text is None else [text]
