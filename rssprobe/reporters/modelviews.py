"""The model line of `show`: what was trained, the layer count a size target resolved to, and what
"per parameter" counts (unique parameters: tied weights once)."""

from __future__ import annotations

from ..analysis.results import RunSummary


def model_lines(s: RunSummary) -> list[str]:
    return [*script_lines(s), *_model_lines(s)]


def script_lines(s: RunSummary) -> list[str]:
    sc = s.get("script")
    if not sc:
        return []
    args = " ".join(sc.get("args") or [])
    notes = [n for n in (sc.get("stopped"), sc.get("unfinished_step")) if n]
    launched = [f"launched by your command: {' '.join(sc['command'])}"] if sc.get("command") else []
    return [f"script {sc['path']} (sha256 {str(sc.get('sha256'))[:16]}){' -- ' + args if args else ''}"
            + (f"; {'; '.join(notes)}" if notes else ""), *launched]


def _model_lines(s: RunSummary) -> list[str]:
    m = s.get("model")
    if not m:
        return []
    what = m["architecture"] or m["kind"]
    if m["kind"] == "transformers":
        what += f" ({m['model_type']}, transformers {(m.get('imports') or {}).get('transformers', '?')}, " \
                f"seq_len {m['seq_len']})"
    layers = f", {m['layers']} layers" if m.get("layers") is not None else ""
    if m.get("params_target") is not None and m.get("layers") is not None:
        layers += f" (model.params {m['params_target']:.3g} resolved to {m['layers']})"
    tied = "; ".join(" = ".join(group) for group in m["tied"])
    per = (f"per unique parameter: tied weights counted once ({tied}; {m['tied_params']:,} params)" if tied
           else "per unique parameter (no tied weights)")
    return [f"model {what}{layers}, {m['param_tensors']} parameter tensors", per]


def tensors_note(s: RunSummary) -> str:
    """' (N in this model)': how often a site called once per parameter tensor runs in a step."""
    m = s.get("model")
    return f" ({m['param_tensors']} in this model)" if m else ""
