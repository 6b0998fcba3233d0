"""THE answer sentences: what each command's user came to know, in words and numbers, built from its result.

Every output opens with these (terminal, markdown, HTML, the JSON key "answer"), so one module words them and
every reporter prints them as given. A sentence never contradicts the tables under it: a gated verdict is said
as the gate decides it, and an informative (not gated) change that is significant is named beside it, not
hidden by it. Figures keep the precision the tables show (B/param to 2 decimals, p to 3).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import verdicts
from ..config.patchsets import BASELINE
from ..contract.interventions import SET_TITLES, SETS, parse
from ..contract.status import Status
from . import metrics

MiB = 2**20
# the figures an answer names first, in this order, when a comparison has them (the gated ones lead)
LEAD = metrics.shown(metrics.LEAD)  # the figures the answer names first: the registry's
# the raw-RSS figures a reader of a memory PR asks about next, named when they move (informative)
RAW = ("init.rss", "first_step.rss", "steady.rss", "peak", "steady.glibc_free", "budget.rss_above_baseline")
MOST_NAMED = 3  # an answer names at most this many figures of one kind, then "and N more"


def words(metric: str) -> str:
    """A figure's name as a sentence says it (its registry label, without the prose after a comma)."""
    try:
        return metrics.label(metric)
    except KeyError:
        return metric


def times(count: int) -> str:
    return {1: "once", 2: "twice"}.get(count, f"{count} times")


def _list(items: list[str]) -> str:
    if len(items) > MOST_NAMED:
        items = [*items[:MOST_NAMED], f"{len(items) - MOST_NAMED} more"]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _p(c: dict[str, Any]) -> float | None:
    return c["p_increase"] if c["delta"] >= 0 else c["p_decrease"]


def _delta(c: dict[str, Any]) -> str:
    return f"{words(c['metric'])} {c['delta']:+.2f} B/param"


def _moved(c: dict[str, Any]) -> str:
    p = _p(c)
    return f"{_delta(c)} ({c['mean_a']:.2f} → {c['mean_b']:.2f}" + (f", p = {p:.3f})" if p is not None else ")")


def patches_phrase(specs: list[str]) -> str:
    """Component specs as a reader knows them: a whole declared set by its title ('PR #8132'), else the names."""
    specs = list(specs)
    names = [parse(s)[0] for s in specs]
    out = []
    for set_name, members in SETS.items():
        if members and all(m in names for m in members):
            out.append(SET_TITLES.get(set_name, set_name))
            names = [n for n in names if n not in members]
    return " + ".join([*out, *names])


def side_name(side: dict[str, Any]) -> str:
    """'patched (PR #8132)': the side's label and, when it differs from the label, what it applied."""
    label = str(side.get("label") or side.get("name"))
    applied = patches_phrase(list(side.get("patches") or {}))
    return f"{label} ({applied})" if applied and applied != label else label


def _runs(r: dict[str, Any]) -> str:
    return f"{r['a']['ok']} vs {r['b']['ok']} runs"


def _all_comparisons(r: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for group in r["comparisons"].values() for c in group]


def _ordered(cs: list[dict[str, Any]], order: tuple[str, ...]) -> list[dict[str, Any]]:
    rank = {m: i for i, m in enumerate(order)}
    return sorted(cs, key=lambda c: (rank.get(c["metric"], len(rank)), -abs(c["delta"])))


def _firing(r: dict[str, Any]) -> str | None:
    """How often each side's patches took effect per run: a patch that never ran proves nothing."""
    sentences = []
    for side in (r["b"], r["a"]):
        parts = []
        for spec, counts in (side.get("patches") or {}).items():
            if counts and len(set(counts)) == 1:
                parts.append(f"{spec} {times(counts[0])} per run")
            elif counts:
                parts.append(f"{spec} {min(counts)} to {max(counts)} times per run")
        if parts:
            what = patches_phrase(list(side.get("patches") or {}))
            sentences.append(f"{what} took effect in every run of {side.get('label')}: {', '.join(parts)}.")
    return " ".join(sentences) or None


# the lead's words for its figures (analysis/effects.py FAMILY), as a reviewer says them: the registry's (Metric.words)
LEAD_WORDS = metrics.WORDS


def lead_words(metric: str) -> str:
    return LEAD_WORDS.get(metric) or words(metric)


def interval_text(e: Mapping[str, Any]) -> str:
    """'-3.16 [-6.43, +0.11]', '+0.00, exact': a change with its simultaneous interval, as every display prints it."""
    if e["exact"]:
        return f"{e['delta']:+.2f}, exact"
    if e["low"] is None or e["high"] is None:
        return f"{e['delta']:+.2f} (no interval)"
    return f"{e['delta']:+.2f} [{e['low']:+.2f}, {e['high']:+.2f}]"


def _subject(r: dict[str, Any]) -> str:
    """Who the lead speaks of: the patch set B applied over A ('PR #8132'), else B against A."""
    pa, pb = list(r["a"].get("patches") or {}), list(r["b"].get("patches") or {})
    if pb and not pa:
        return patches_phrase(pb)
    return f"{side_name(r['b'])}, against {side_name(r['a'])},"


def runs_phrase(n_a: int, n_b: int) -> str:
    return f"{n_a} vs {n_b}"


def lead_sentence(r: dict[str, Any]) -> str | None:
    """Does B change host RAM, where and by how much: each lead figure by its claim (analysis/effects.py), with
    its change and simultaneous interval in B/param."""
    lead = r.get("lead") or {}
    effects = lead.get("effects") or []
    if not effects:
        return None
    by = {claim: [e for e in effects if e["claim"] == claim] for claim in
          (verdicts.UNCHANGED, verdicts.LOWER, verdicts.HIGHER, verdicts.UNCONFIRMED, verdicts.WITHIN_NOISE)}
    clauses = []
    if by[verdicts.UNCHANGED]:
        clauses.append("leaves " + _list_all([f"{lead_words(e['metric'])} ({interval_text(e)})"
                                              for e in by[verdicts.UNCHANGED]]) + " unchanged")
    for claim, verb in ((verdicts.LOWER, "lowers"), (verdicts.HIGHER, "raises")):
        if by[claim]:
            clauses.append(verb + " " + _list_all([f"{lead_words(e['metric'])} by {abs(e['delta']):.2f} B/param "
                                                   f"[{e['low']:+.2f}, {e['high']:+.2f}]" for e in by[claim]]))
    if by[verdicts.UNCONFIRMED]:
        n = runs_phrase(by[verdicts.UNCONFIRMED][0]["n_a"], by[verdicts.UNCONFIRMED][0]["n_b"])
        clauses.append("reads " + _list_all([f"{lead_words(e['metric'])} {'higher' if e['delta'] > 0 else 'lower'} "
                                             f"({interval_text(e)})" for e in by[verdicts.UNCONFIRMED]])
                       + f", which {n} runs cannot confirm once its figures are corrected for together")
    noise = by[verdicts.WITHIN_NOISE]
    if noise:
        n = runs_phrase(noise[0]["n_a"], noise[0]["n_b"])
        clauses.append(("its effect on " if clauses else "has no effect it can show on ")
                       + _list_all([f"{lead_words(e['metric'])} ({interval_text(e)})" for e in noise])
                       + (f" is within run-to-run noise at {n} runs" if clauses else
                          f": each is within run-to-run noise at {n} runs"))
    return (f"{_subject(r)} " + "; ".join(clauses) + f" (B - A in B/param [simultaneous "
            f"{100 * (1 - lead['alpha']):.0f}% interval]).")


def _list_all(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def resolution_sentence(r: dict[str, Any]) -> str | None:
    """What these runs cannot resolve, and how many repeats would: the exact test's floor against the correction,
    and the smallest change those repeats would resolve at the noise measured here (analysis/effects.py)."""
    lead = r.get("lead") or {}
    unsure = [e for e in lead.get("effects") or [] if e["claim"] in (verdicts.WITHIN_NOISE, verdicts.UNCONFIRMED)]
    if not unsure:
        return None
    noise = [e for e in unsure if e["claim"] == verdicts.WITHIN_NOISE] or unsure
    n = runs_phrase(noise[0]["n_a"], noise[0]["n_b"])
    needed = lead.get("repeat_needed")
    each = lead["alpha"] / max(lead["m"], 1)
    shown = [e for e in noise if e.get("resolves") is not None]
    resolves = _list_all([f"{e['resolves']:.2f}{' B/param' if i == 0 else ''} of {lead_words(e['metric'])}"
                          for i, e in enumerate(shown)]) if shown else ""
    if needed:
        would = (f"{needed} vs {needed} runs would resolve changes beyond {resolves} at the noise these runs "
                 "measured") if shown else f"{needed} vs {needed} runs could confirm it"
        return (f"{n} runs cannot confirm a change: an exact test's p is never below {lead['smallest_p']:.3f} "
                f"at {n}, and each of the {lead['m']} figures that vary needs p ≤ {each:.3f} (Bonferroni); "
                f"{would}.")
    if not shown:
        return None
    return f"{n} runs cannot resolve changes smaller than {resolves} at the noise they measured."


def gate_sentence(r: dict[str, Any]) -> str:
    """The gate's word over the gated figures alone (one-sided exact test, uncorrected, as `gate` decides)."""
    verdict = r["verdict"]
    word = {verdicts.PASS: "PASS", verdicts.SAME: "PASS", verdicts.IMPROVEMENT: "PASS",
            verdicts.REGRESSION: "FAIL"}.get(verdict, "UNDECIDED")
    head = f"Gate: {word} (exit {verdicts.exit_code(verdict)})"
    t = r["threshold_bytes_per_param"]
    comps = _all_comparisons(r)
    gated = _ordered([c for c in comps if c["gated"]], LEAD)
    moved = [c for c in gated if c["verdict"] in verdicts.MOVED]
    if verdict == verdicts.REGRESSION:
        ups = [c for c in moved if c["verdict"] == verdicts.REGRESSION]
        return f"{head}: {_list([_moved(c) for c in ups])} ({_runs(r)}, threshold {t} B/param)."
    if verdict == verdicts.IMPROVEMENT:
        return f"{head}, an improvement: {_list([_moved(c) for c in moved])} ({_runs(r)}, threshold {t} B/param)."
    if verdict in (verdicts.PASS, verdicts.SAME):
        names = [words(c["metric"]) for c in gated if c["metric"] in LEAD] or [words(c["metric"]) for c in gated]
        return f"{head}: no gated figure ({_list(names)}) changes by {t} B/param or more ({_runs(r)})."
    return f"{head}: {undecided_reason(r)}."


def comparison(r: dict[str, Any], gate_first: bool = False) -> list[str]:
    """diff: does B change host RAM against A, where and by how much (the lead, with a correction over its
    figures), then the gate's word for CI; `gate_first` (gate): the gate's word and exit code lead
    (analysis.compare.Result.as_dict() without 'answer')."""
    out = _comparison(r)
    if gate_first:
        gate = gate_sentence(r)
        out = [gate, *(s for s in out if s != gate)]
    return out


def _comparison(r: dict[str, Any]) -> list[str]:
    a, b = side_name(r["a"]), side_name(r["b"])
    if r.get("same_runs"):
        n = r["a"]["runs"]
        return [f"A and B are the same runs ({r['a']['name']}, {n} run{'' if n == 1 else 's'}): comparing runs with "
                "themselves shows nothing; compare against other runs.", gate_sentence(r)]
    lead = lead_sentence(r)
    if r["problems"] or lead is None:
        out = [f"Undecided whether {b} changes host memory against {a}: {undecided_reason(r)}."]
        if lead is not None:
            out.append(lead)
    else:
        out = [lead]
        resolution = resolution_sentence(r)
        if resolution:
            out.append(resolution)
        out.append(gate_sentence(r))
    firing = _firing(r)
    if firing:
        out.append(firing)
    return out


def undecided_reason(r: dict[str, Any]) -> str:
    """Why a comparison cannot decide, in one clause: the first problem, else the figure that is '~'."""
    if r["problems"]:
        return r["problems"][0]
    unsure = [c for c in _all_comparisons(r) if c["gated"] and c["verdict"] == verdicts.NOT_SIGNIFICANT]
    if unsure:
        c = max(unsure, key=lambda c: abs(c["delta"]))
        p = _p(c)
        return (f"{_delta(c)}, past the {r['threshold_bytes_per_param']} B/param threshold, but {_runs(r)} cannot "
                f"confirm it (p = {p:.3f} > {r['alpha']}): run more repeats")
    unsure = [c for c in _all_comparisons(r) if c["gated"] and c["verdict"] == verdicts.UNDECIDED]
    if unsure:
        return f"{words(unsure[0]['metric'])}: {unsure[0]['reason']}"
    return "no gated figure was measured in both sides"


def size_words(params: float | None) -> str:
    """16785408 -> '16.8 M'; 7e9 -> '7.0 B' (parameters)."""
    if not params:
        return "?"
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if params >= scale:
            return f"{params / scale:.1f} {unit}"
    return f"{params:.0f}"


def scale_command(s: dict[str, Any]) -> str:
    """The command that fits fixed + slope x params for this run's model (a script: over its own size option)."""
    script = s.get("script") or {}
    if script.get("path"):
        args = " ".join(script.get("args") or [])
        return (f"`rssprobe scale --script {script['path']} --size-arg NAME=V1,V2,V3"
                + (f" -- {args}`" if args else "`") + " (NAME: the script's own size option)")
    return f"`rssprobe scale {s.get('scenario')} --params 4e6,16e6,64e6`"


def trainable_words(s: dict[str, Any]) -> str:
    """', 106.5 k trainable (0.55%)' for a fine-tune (some parameters frozen); empty when every one trains."""
    trainable, params = (s.get("model") or {}).get("trainable_params"), s.get("params")
    if trainable is None or not params or trainable >= params:
        return ""
    return f", {size_words(trainable) if trainable else '0'} trainable ({100 * trainable / params:.2f}%)"


def mib(value_bytes: float) -> str:
    return f"{value_bytes / MiB:,.0f} MiB" if abs(value_bytes) >= 10 * MiB else f"{value_bytes / MiB:,.1f} MiB"


def _what(s: dict[str, Any]) -> str:
    z = s.get("zero") or {}
    offload = [f"{k.removeprefix('offload_')} offloaded to {v}" for k, v in z.items()
               if k.startswith("offload_") and v]
    ranks = f", {s['world_size']} ranks" if s.get("world_size", 1) > 1 else ""
    stage = f"ZeRO-{z['stage']}" if z.get("stage") is not None else "ZeRO stage not known"
    what = f"{s['scenario']} ({size_words(s.get('params'))} parameters{trainable_words(s)}, {stage}"
    return what + "".join(f", {o}" for o in offload) + f"{ranks}, {s['steps_done']} steps)"


# the parts of RSS an answer names after the live buffers, with the words a reader knows them by
def _rest(budget: dict[str, Any] | None) -> list[str]:
    parts = (budget or {}).get("parts") or {}
    named = sorted(((label, p.get("bytes_per_param") or 0.0) for label, p in parts.items()
                    if label != "live tensors"), key=lambda x: -x[1])
    shown = [f"{label} {value:.2f}" for label, value in named[:MOST_NAMED] if value >= 0.05]
    others = sum(value for _label, value in named[len(shown):])
    return shown + ([f"the other parts {others:.2f}"] if others >= 0.005 else [])


def run(s: dict[str, Any]) -> list[str]:
    """show RUN: how much host memory does this run hold, and who owns it? (Summary.as_dict() without 'answer')."""
    m = s.get("metrics") or {}
    if s.get("status") != Status.OK:
        why = f" ({s['error']})" if s.get("error") else ""
        first = (f"This run did not finish: {s.get('status')}{why}; its figures cover what was measured before it "
                 "stopped.")
        return [first] if not s.get("scenario") else [first.replace("This run", f"This run of {_what(s)}")]
    end, live, peak = m.get("budget.rss_above_baseline"), m.get("budget.live"), m.get("peak")
    if end is None or live is None:
        first = (f"This run of {_what(s)} holds {m['steady.rss']:.2f} B/param of host RAM above its pre-model "
                 f"baseline in the steady steps" if "steady.rss" in m else f"This run of {_what(s)} finished")
        return [first + (f"; peak {peak:.2f} B/param." if peak is not None else ".")]
    params = s.get("params") or 0
    out = [f"This run of {_what(s)} holds {end:.2f} B/param of host RAM above its pre-model baseline at the end "
           f"({mib(end * params)}), {live:.2f} of it live ZeRO buffers; its peak is {peak:.2f} B/param."]
    if end - live > live:  # most of the figure is not ZeRO state: name what it probably is before anything else
        out[0] = (f"This run of {_what(s)} holds {end:.2f} B/param of host RAM above its pre-model baseline at the "
                  f"end ({mib(end * params)}), but only {live:.2f} of it is live ZeRO buffers: the other "
                  f"{end - live:.2f} is mostly a fixed cost (modules imported, libraries mapped, allocator pools) "
                  f"divided by this model's {size_words(params)} parameters, not a cost per parameter; "
                  f"{scale_command(s)} separates the two. Its peak is {peak:.2f} B/param.")
    rest = _rest(s.get("budget"))
    trim = m.get(metrics.TRIMMED)
    if rest:
        out.append("The rest, by owner (B/param): " + "; ".join(rest)
                   + (f"; {trim:.2f} remain after a final malloc_trim(0)." if trim is not None else "."))
    pinned = pinned_sentence(m)
    if pinned:
        out.append(pinned)
    return out


def pinned_sentence(m: dict[str, float]) -> str | None:
    """What torch's pinned host allocator holds (measured on CUDA) or would hold (predicted on a CPU run)."""
    requested = m.get("pinned.requested")
    if not requested:
        return None
    if "pinned.held" in m:
        return (f"Pinned host memory: DeepSpeed pinned {requested:.2f} B/param and CUDA's caching host allocator "
                f"holds {m['pinned.held']:.2f} (measured), {m.get('pinned.slack', 0.0):.2f} of it rounding slack.")
    held = m.get("pinned.held_predicted")
    if held is None:
        return None
    return (f"On CUDA, DeepSpeed's {requested:.2f} B/param of pinned buffers would hold {held:.2f} B/param "
            f"({held - requested:.2f} of power-of-two rounding slack; predicted by torch's caching host allocator "
            "rule, not measured on this CPU run).")


def group(data: dict[str, Any]) -> list[str]:
    """show GROUP: the same question over repeats: each figure as mean ± sd of the finished runs."""
    runs = data["runs"]
    ok = [s for s in runs if s["status"] == Status.OK]
    rows = {r["figure"]: r for r in data.get("across", [])}

    def fig(name: str, words_: str) -> str | None:
        r = rows.get(name)
        if r is None:
            return None
        return f"{words_} {r['mean']:.2f}" + (f" ± {r['sd']:.2f}" if r["sd"] is not None else "")

    first_run = (ok or runs)[0]
    lead = f"{len(runs)} runs of {first_run.get('scenario')} [{data.get('label') or first_run.get('label')}], " \
           f"{len(ok)} finished"
    if not ok:
        return [f"{lead}: no run finished, so the group has no figures ({runs[0].get('status')}: "
                f"{runs[0].get('error')})."]
    figures = [f for f in (fig("budget.rss_above_baseline", "RSS at the end"),
                           fig(metrics.TRIMMED, "after a final trim"),
                           fig("budget.live", "live buffers"), fig("peak", "peak")) if f]
    out = [f"{lead}: {', '.join(figures)} B/param above the pre-model baseline (mean ± sd of the runs)."]
    if len(ok) < len(runs):
        out.append(f"{len(runs) - len(ok)} of {len(runs)} runs did not finish: the group cannot be compared as "
                   "good.")
    return out


def _fit(row: dict[str, Any]) -> str:
    slope, fixed = row["slope_bytes_per_param"], row["fixed_bytes"]
    si, fi = row.get("slope_interval_bytes_per_param"), row.get("fixed_interval_bytes")
    return (f"{slope:.2f}" + (f" ± {si:.2f}" if si is not None else "") + " B/param plus "
            f"{fixed / MiB:.0f}" + (f" ± {fi / MiB:.0f}" if fi is not None else "") + " MiB once")


def sweep(data: dict[str, Any]) -> list[str]:
    """show SCALEDIR: what grows with the model and what does not (bytes = fixed + slope x params)."""
    fits = {r["figure"]: r for r in data.get("fit", [])}
    sizes = [g for g in data.get("sizes_run", []) if g.get("ok")]
    span = f"{size_words(min(g['params'] for g in sizes))} to {size_words(max(g['params'] for g in sizes))} " \
        f"parameters, {data.get('runs_in_fit', 0)} runs" if sizes else "no finished size"
    lead = next((f for f in metrics.shown(metrics.SWEEP_LEAD) if f in fits), None)
    if lead is None:
        return [f"The size sweep of {data.get('scenario_name')} has no fit yet ({span}): it needs two sizes that "
                "finished."]
    out = [f"Host RAM of {data.get('scenario_name')} costs {_fit(fits[lead])} ({words(lead)}, fitted over "
           f"{span}; 95% intervals)."]
    more = [f"{words(f)} {_fit(fits[f])}" for f in ("budget.live", "steady.rss", "peak") if f in fits and f != lead]
    if more:
        out.append("Also: " + "; ".join(more) + ".")
    if data.get("problems"):
        out.append(f"Not every size finished: {data['problems'][0]}.")
    return out


def _part(d: dict[str, Any]) -> str:
    scale, unit = (MiB, "MiB") if d["part"] == "fixed" else (1, "B/param")
    interval = f" ± {d['interval'] / scale:.2f}" if d.get("interval") is not None else ""
    return f"{d['part']} {d['delta'] / scale:+.2f}{interval} {unit}"


def sweep_comparison(r: dict[str, Any]) -> list[str]:
    """diff/gate of two size sweeps: does B change the per-parameter cost or the fixed cost of host memory?"""
    a, b = r["a"].get("label") or r["a"]["scale"], r["b"].get("label") or r["b"]["scale"]
    gated = [c for c in r["comparisons"] if c["gated"]]
    moved = [f"{words(c['figure'])} {_part(c[p])}" for c in gated for p in ("slope", "fixed")
             if c[p]["verdict"] in verdicts.MOVED]
    verdict = r["verdict"]
    thresholds = (f"thresholds {r['slope_threshold_bytes_per_param']} B/param and "
                  f"{r['fixed_threshold_bytes'] / MiB:g} MiB")
    if verdict == verdicts.REGRESSION:
        return [f"{b} needs more host memory than {a}: {_list(moved)} ({thresholds})."]
    if verdict == verdicts.IMPROVEMENT:
        return [f"{b} needs less host memory than {a}: {_list(moved)} ({thresholds})."]
    lead = [c for c in gated if c["figure"] in LEAD] or gated[:1]
    if verdict in (verdicts.PASS, verdicts.SAME):
        shown = "; ".join(f"{words(c['figure'])} {_part(c['slope'])}, {_part(c['fixed'])}" for c in lead)
        return [f"{b} changes neither the per-parameter nor the fixed cost of any gated figure against {a}: "
                f"{shown} ({thresholds})."]
    reason = r["problems"][0] if r["problems"] else next(
        (f"{words(c['figure'])} {c[p]['reason']}" for c in gated for p in ("slope", "fixed")
         if c[p]["verdict"] not in (verdicts.SAME, *verdicts.MOVED)), "no gated figure in both sweeps")
    return [f"Undecided whether {b} changes host memory against {a}: {reason}."]


def limits(data: dict[str, Any]) -> list[str]:
    """gate --limits: does every finished repeat stay under each ceiling?"""
    checks, verdict = data["checks"], data["verdict"]
    if verdict == verdicts.REGRESSION:
        over = [c for c in checks if c["verdict"] == verdicts.REGRESSION]
        return [f"{data['side']} breaks its ceilings: " + _list(
            [f"{words(c['metric'])} {max(c['values']):.2f} B/param against a ceiling of {c['limit']:.2f}"
             for c in over]) + " (every repeat above it)."]
    if verdict == verdicts.PASS:
        return [f"{data['side']} stays under every ceiling of {data['limits']}: " + _list(
            [f"{words(c['metric'])} at most {max(c['values']):.2f} of {c['limit']:.2f} B/param" for c in checks])
            + "."]
    why = data["problems"][0] if data["problems"] else next(
        (f"{words(c['metric'])}: {c['reason']}" for c in checks if c["verdict"] == verdicts.UNDECIDED), "")
    return [f"Undecided whether {data['side']} stays under the ceilings of {data['limits']}: {why}."]


def campaign(kind: str, data: dict[str, Any]) -> list[str]:
    """show MATRIX|PLAN: in how many configurations does the patch change the gated figure, and by how much."""
    cells = data["cells"]
    done = [c for c in cells if c["status"] == Status.DONE]
    head = f"The {kind} has {len(cells)} cells, {len(done)} done" + (
        f", {len(data['failed'])} failed" if data.get("failed") else "")
    gated = metrics.TRIMMED
    effects = [(c, c["effects"][gated]) for c in done if gated in (c.get("effects") or {})]
    levels = [(c, c["figures"][gated]) for c in done if (c.get("figures") or {}).get(gated) is not None]
    if len(levels) > 1 and all(c["patch"] == BASELINE for c in cells):  # nothing patched: no effects either
        (lo_c, lo), (hi_c, hi) = min(levels, key=lambda cv: cv[1]), max(levels, key=lambda cv: cv[1])
        return [head + f"; no cell is patched, so it compares configurations: RSS after a final trim is "
                f"{lo:.2f} B/param at the lowest ({_cell(lo_c)}) and {hi:.2f} at the highest ({_cell(hi_c)})."]
    if not effects:
        return [head + "; no patched cell has a finished baseline beside it yet."]
    moved = [(c, e) for c, e in effects if e["verdict"] in verdicts.MOVED]
    deltas = [e["delta"] for _c, e in effects]
    out = [head + f"; the patch changes RSS after a final trim in {len(moved)} of the {len(effects)} configurations "
           f"where it was measured against its baseline (changes from {min(deltas):+.2f} to {max(deltas):+.2f} "
           "B/param)."]
    if moved:
        out.append("Moved: " + _list([f"{_cell(c)} {e['delta']:+.2f} B/param ({e['verdict']})" for c, e in moved])
                   + ".")
    return out


def _cell(c: dict[str, Any]) -> str:
    if "axis" in c:  # a plan's cell
        return f"{c['axis']}={c['value']} [{c['patch']}]"
    libraries = "".join(f" {lib} {c[lib]}" for lib in ("transformers", "accelerate") if c.get(lib))
    return (f"torch {c.get('torch') or '?'} deepspeed {c.get('deepspeed') or '?'}{libraries} {c.get('allocator')} "
            f"[{c['patch']}]")


def bisect(data: dict[str, Any]) -> list[str]:
    """bisect: which version, component or commit moved the figure, and by how much."""
    metric, status = words(data["metric"]), data.get("status")
    comparison = data.get("comparison") or {}
    c = next((c for group in (comparison.get("comparisons") or {}).values() for c in group
              if c["metric"] == data["metric"]), None)
    moved = f" ({c['mean_a']:.2f} → {c['mean_b']:.2f} B/param, {c['delta']:+.2f})" if c else ""
    mode = data.get("mode")
    if status == "found" and mode == "versions":
        return [f"{data['axis']} {data['first_moved']} is the first version that moves {metric}{moved}; "
                f"{data['axis']} {data['last_same']} is the last that does not."]
    if status == "found" and mode == "components":
        return [f"{' + '.join(data['minimal'])} is what moves {metric}{moved}, of {', '.join(data['components'])}."]
    if status == "found" and mode == "commits":
        return [f"Commit {data['culprit'][:10]} is the first that moves {metric}{moved}."]
    if status == "unchanged":
        return [f"Nothing tried moves {metric} by {data['threshold']} B/param or more against {data['reference']}."]
    return [f"Undecided: {data['lines'][-1] if data.get('lines') else 'the search did not finish'}."]
