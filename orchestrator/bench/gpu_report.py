"""The GPU check's reports: ``gpu-check.json`` (everything) and ``gpu-check.md`` (for people).

The document (``build_doc``) has: ``manifest`` (the command, versions, build manifest, model
files and their facts), ``gpu`` (NVML: name, compute capability, bus width, memory clock, peak
bandwidth; ``null`` on CPU), ``traffic`` (bytes per step), ``steps`` (where the time went),
``rows`` (every figure with its spread), ``recommended`` (K per acceptance rate), ``samples``
and ``complete`` (False when the time limit or an error cut the run short; ``notes`` say why).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.bench import vision

SCHEMA_VERSION = 1
REQUIRED_KEYS = ("schema_version", "complete", "notes", "manifest", "gpu", "traffic", "steps", "rows", "recommended")


def build_doc(**parts: Any) -> dict[str, Any]:
    """The report document from its parts (``REQUIRED_KEYS`` plus ``samples``); missing parts are null."""
    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    for key in (*REQUIRED_KEYS[1:], "samples"):
        doc[key] = parts.get(key)
    return doc


def write_reports(out_dir: Path, doc: dict[str, Any]) -> tuple[Path, Path]:
    """Write ``gpu-check.json`` and ``gpu-check.md`` into ``out_dir``; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    js, md = out_dir / "gpu-check.json", out_dir / "gpu-check.md"
    js.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    md.write_text(markdown(doc))
    return js, md


def _num(v: Any, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _spread_text(sp: dict[str, Any] | None, fmt: str) -> str:
    if not sp or sp.get("median") is None:
        return "-"
    return f"{fmt.format(sp['median'])} [{fmt.format(sp['min'])}-{fmt.format(sp['max'])}]"


def steps_table(steps: list[dict[str, Any]]) -> str:
    """Where the time went: one line per step, with its share of the total (seconds)."""
    total = sum(s["seconds"] for s in steps) or 1.0
    lines = [f"{'step':<28} {'seconds':>8} {'share':>6}  status"]
    for s in steps:
        lines.append(f"{s['name']:<28} {s['seconds']:>8.1f} {s['seconds'] / total:>6.0%}  {s['status']}")
    lines.append(f"{'total':<28} {total:>8.1f}")
    return "\n".join(lines)


def launch_settings_section(
    rows: list[dict[str, Any]], traffic: dict[str, Any], gpu: dict[str, Any] | None
) -> list[str]:
    """``orchestrator tune``'s rows: prefill per ``-ub``, decode with the draft's backend sampling on
    and off (each flag passed), each beside the default from the same rounds; decode beside its
    bandwidth bound."""
    if not rows:
        return []
    bw = (gpu or {}).get("peak_bandwidth_bytes_per_s")
    per_token = traffic.get("decode_bytes_per_token")
    bound = bw / per_token if bw and per_token else None
    out = ["", "## Launch settings (orchestrator tune)", ""]
    out.append("| setting | measure | tok/s median [IQR] | vs default | rounds | of decode bandwidth bound |")
    out.append("|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["measure"], r["setting"])):
        of_bound = _num(r["median"] / bound, "{:.1%}") if bound and r["measure"] == "decode" else "-"
        out.append(
            f"| {r['setting']} | {r['measure']} | {_num(r['median'])} [{_num(r['q1'])}-{_num(r['q3'])}] "
            f"| {_num(r['ratio'], '{:.3f}')}x | {r['n']} | {of_bound} |"
        )
    best = rows[0].get("recommended") or {}
    out.append("")
    bs = best.get("backend_sampling")
    bs_text = (
        "not measured"
        if not best.get("backend_sampling_measured")
        else ("as it is (on and off within the margin)" if bs is None else str(bs).lower())
    )
    out.append(f"Recommended: ubatch_size {best.get('ubatch_size') or 'default'}, "
               f"backend_sampling {bs_text} (bs-on and bs-off: each flag passed).")  # fmt: skip
    return out


def markdown(doc: dict[str, Any]) -> str:
    """The Markdown report: GPU, model, figures table, recommendation, where the time went."""
    m, gpu, t = doc.get("manifest") or {}, doc.get("gpu"), doc.get("traffic") or {}
    out = ["# GPU check", ""]
    out.append(f"Complete: **{'yes' if doc.get('complete') else 'no'}**. " + " ".join(doc.get("notes") or []))
    out += ["", "## Machine", ""]
    if gpu:
        bw = gpu.get("peak_bandwidth_bytes_per_s")
        out.append(
            f"{gpu.get('name')}, compute capability {gpu.get('compute_capability')}, "
            f"{gpu.get('bus_width_bits')}-bit bus at {gpu.get('max_memory_clock_mhz')} MHz: "
            f"peak {_num(bw and bw / 1e9, '{:.0f}')} GB/s; driver {gpu.get('driver')} (CUDA {gpu.get('cuda_driver')})."
        )
    else:
        out.append(
            f"CPU only ({m.get('cpu', 'unknown CPU')}; load average {m.get('load_average')} at the start, "
            f"{m.get('load_average_at_end')} at the end: other work on the machine shows in every figure)."
        )
    out.append(f"llama-server: {m.get('server_version')} (build {m.get('build_key')}, {m.get('build_source')}).")
    out += ["", "## Model", ""]
    out.append(
        f"`{m.get('shape')}` at scale `{m.get('scale')}`, `{m.get('quant')}`: "
        f"{_num(m.get('file_bytes'), '{:,}')} bytes; "
        f"bytes read per decoded token {_num(t.get('decode_bytes_per_token'), '{:,.0f}')}, "
        f"per draft step {_num(t.get('draft_step_bytes'), '{:,.0f}')}."
    )
    out += ["", "## Decode speed", ""]
    out.append(
        "| path | acceptance (set) | K | decode tok/s median [min-max] | speedup vs K=0 [min-max] "
        "| acceptance (measured) | tokens/step | bytes/token | of bandwidth bound | bandwidth-bound speedup "
        "| llama-server CPU ms/token [min-max] | CPU-time speedup [min-max] |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in doc.get("rows") or []:
        d, s = r["decode_tok_s"], r["speedup"]
        k = "adaptive" if r["k"] < 0 else r["k"]  # the endpoint's draft-length policy chose per request
        out.append(
            f"| {r['path']} | {1 - r['q']:.2f} | {k} | {_num(d['median'])} [{_num(d['min'])}-{_num(d['max'])}] "
            f"| {_num(s['median'], '{:.3f}')} [{_num(s['min'], '{:.2f}')}-{_num(s['max'], '{:.2f}')}] "
            f"| {_num(r['acceptance'], '{:.3f}')} | {_num(r['tokens_per_step'], '{:.2f}')} "
            f"| {_num(r.get('bytes_per_token'), '{:,.0f}')} | {_num(r.get('bandwidth_fraction'), '{:.1%}')} "
            f"| {_num(r.get('bandwidth_bound_speedup'), '{:.2f}')} "
            f"| {_spread_text(r.get('server_cpu_ms_per_token'), '{:.0f}')} "
            f"| {_spread_text(r.get('cpu_speedup'), '{:.2f}')} |"
        )
    out += launch_settings_section(m.get("launch_settings") or [], t, gpu)
    out += vision.section(m.get("vision"))
    out += ["", "## Recommended draft length", ""]
    for acc, rec in (doc.get("recommended") or {}).items():
        out.append(f"- acceptance {acc}: **K = {rec['k']}** (best median K {rec['best_median_k']}; {rec['why']})")
    out += ["", "## Where the time went", "", "```", steps_table(doc.get("steps") or []), "```", ""]
    return "\n".join(out)
