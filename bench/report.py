"""The issue's target table, filled from the figures the other bench scripts saved.

Reads bench/results/{locomo,scale-1000000 (else scale-100000),mem0,throughput}.json, prints each
target next to Engram's figure, the baselines, whether it is met and the script that measured
it, and writes bench/results/summary.json and summary.png (LoCoMo recall@k curves against the
baselines, and every target as Engram's figure relative to it). A missing result file shows as
"not measured"; nothing is re-measured here.

Run: .venv/bin/python bench/report.py [--results bench/results]
"""

from __future__ import annotations

import argparse
import json
import textwrap
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"

# ../shared/bench/locomo/README.md, dev split, measured outside Engram with the same turn text
LOCOMO_BASELINES = {
    "BM25": {"R@1": 0.325, "R@5": 0.547, "R@10": 0.611, "R@20": 0.668, "hit@10": 0.668},
    "dense MiniLM": {"R@1": 0.207, "R@5": 0.443, "R@10": 0.545, "R@20": 0.643, "hit@10": 0.614},
    "RRF(60)": {"R@1": 0.302, "R@5": 0.539, "R@10": 0.625, "R@20": 0.700, "hit@10": 0.686},
}


@dataclass
class Row:
    metric: str
    target: str
    engram: str
    baseline: str
    met: bool | None  # None: not measured
    source: str
    ratio: float | None = None  # Engram's figure over the target, oriented so >= 1 is met


def _load(results: Path, *names: str) -> tuple[str, dict[str, Any]] | None:
    for name in names:
        path = results / f"{name}.json"
        if path.exists():
            return name, json.loads(path.read_text())
    return None


def _at_least(value: float, target: float) -> tuple[bool, float]:
    return value >= target, value / target


def _at_most(value: float, target: float) -> tuple[bool, float]:
    return value <= target, target / value if value else float("inf")


def _missing(metric: str, target: str, source: str) -> Row:
    return Row(metric, target, "not measured", "", None, source)


def locomo_rows(results: Path) -> list[Row]:
    """Issue 10's targets on the default configuration (R@10 >= 0.76, R@5 >= 0.66), with the
    held-out conversations and MemoClaw's access accounting beside them."""
    source = "bench/locomo.py <locomo-dev.json>"
    loaded = _load(results, "locomo")
    if loaded is None or "default" not in loaded[1]:
        return [_missing("LoCoMo dev R@10 through the API (default)", ">= 0.76", source)]
    _, data = loaded
    rows = []
    default = data["default"]
    held_out = default.get("split", {}).get("held out conv-42/43", {}).get("overall")
    for k, target in (("R@10", 0.76), ("R@5", 0.66)):
        overall = default["table"]["overall"]
        met, ratio = _at_least(overall[k], target)
        extra = f"held out conv-42/43 {held_out[k]:.3f}" if held_out else "no split check"
        baseline = ", ".join(f"{name} {v[k]:.3f}" for name, v in LOCOMO_BASELINES.items())
        if k == "R@10" and "memoclaw-access" in data:
            memoclaw = data["memoclaw-access"]["table"]["overall"]["R@10"]
            baseline += f", MemoClaw's access accounting {memoclaw:.3f}"
        rows.append(Row(f"LoCoMo dev {k} through the API (default, auto-recall)",
                        f">= {target}", f"{overall[k]:.3f} ({extra})", baseline, met, source,
                        ratio))  # fmt: skip
    return rows


def _case(data: dict[str, Any], case: str) -> dict[str, Any]:
    modes = data["modes"]
    return dict(modes[list(modes)[-1]][case])


def scale_rows(results: Path) -> list[Row]:
    """Issue 18's big-wallet rows: a 100k-memory wallet without and with filters (and the
    vector side's index recall against an exact scan), the ~900-memory wallet with filters, and
    HTTP over the bare SQL of the same statements for the small wallet."""
    targets = {
        "big/no-filter": ("recall server p95, big wallet (100k), no filters", 15.0),
        "big/filters": ("recall server p95, big wallet (100k), filters", 30.0),
        "small/filters": ("recall server p95, ~900-memory wallet, filters", 5.0),
    }
    over_target = ("HTTP recall / bare SQL, ~900-memory wallet (p50)", "<= 1.5x")
    loaded = _load(results, "scale-1000000", "scale-100000")
    if loaded is None:
        source = "bench/scale.py --rows 1000000"
        rows = [_missing(f"{m}, 1M rows", f"<= {t:g} ms", source) for m, t in targets.values()]
        return [*rows, _missing(*over_target, source)]
    _, data = loaded
    rows_total = int(data["args"]["rows"])
    source = f"bench/scale.py --rows {rows_total}"
    scale = f"{rows_total:,} rows"
    recall = data.get("index_recall", {}).get("big/no-filter", {})
    index_recall = recall.get("service_candidates_recall_at_10")
    index_text = f"{index_recall:.3f}" if index_recall is not None else "n/a"
    out = []
    for case, (metric, target) in targets.items():
        figures = _case(data, case)
        full = figures["full_k_service"]
        full_k = full["full"] == full["eligible"]
        p95 = float(figures["service_ms"]["p95"])
        met, ratio = _at_most(p95, target)
        wanted = f"<= {target:g} ms, full k"
        engram = f"{p95:.1f} ms (p50 {figures['service_ms']['p50']:.1f}), full k: {full_k}"
        if case == "big/no-filter":
            met = met and (index_recall or 0) >= 0.95
            wanted += ", index recall@10 >= 0.95"
            engram += f", index recall@10 {index_text}"
        bare = figures.get("bare_sql_ms", {}).get("p95")
        floor = f"bare SQL p95 {float(bare):.1f} ms" if bare is not None else ""
        out.append(Row(f"{metric}, {scale}", wanted, engram, floor, met and full_k, source,
                       ratio))  # fmt: skip
    over = {c: float(_case(data, c)["http-uvicorn_over_bare"]["p50"])
            for c in ("small/no-filter", "small/filters")}  # fmt: skip
    worst = max(over.values())
    met, ratio = _at_most(worst, 1.5)
    engram = ", ".join(f"{case.split('/')[1]} {v:.2f}x" for case, v in over.items())
    out.append(Row(f"{over_target[0]}, {scale}", over_target[1], engram, "", met, source, ratio))
    return out


def mem0_rows(results: Path) -> list[Row]:
    source = "bench/mem0_side.py <locomo-dev.json>"
    loaded = _load(results, "mem0")
    if loaded is None:
        return [_missing("Engram recall latency / mem0 search latency", "<= 1.0x", source)]
    _, data = loaded
    mem0 = data["systems"]["mem0"]
    baseline = (
        f"mem0 R@10 {mem0['table']['overall']['R@10']:.3f},"
        f" search p50 {mem0['latency_ms']['p50']:.1f} ms"
    )
    rows = []
    for system, ratios in data["latency_ratio"].items():
        engram = data["systems"][system]
        met, ratio = _at_most(float(ratios["p50"]), 1.0)  # issue 40
        rows.append(
            Row(
                f"Engram ({system.split('(')[-1].rstrip(')')}) / mem0 latency, same data (p50)",
                "<= 1.0x",
                f"{ratios['p50']:.2f}x (p95 {ratios['p95']:.2f}x; Engram p50"
                f" {engram['latency_ms']['p50']:.1f} ms, R@10"
                f" {engram['table']['overall']['R@10']:.3f})",
                baseline,
                met,
                source,
                ratio,
            )
        )
    return rows


def throughput_rows(results: Path) -> list[Row]:
    """The mix (req/s, p99, errors), the CPU it cost per request, and the batch store of 100."""
    targets = {
        "batch": ("batch store of 100, local embedder (1 client, p50)", "<= 300 ms"),
        "mix": ("64 clients, mix 60% list/get, 25% recall, 15% store",
                ">= 500 req/s, p99 <= 150 ms, 0 errors"),
        "cpu": ("CPU per request in the mix (server loop + its threads + PostgreSQL)",
                "<= 3.5 ms"),
    }  # fmt: skip
    loaded = _load(results, "throughput")
    if loaded is None:
        source = "bench/throughput.py --only batch,mix --seconds 15 --workers 2"
        return [_missing(metric, target, source) for metric, target in targets.values()]
    _, data = loaded
    rows: list[dict[str, Any]] = data["rows"]
    settings = data.get("settings", {})
    source = settings.get("command") or f"bench/throughput.py --workers {settings.get('workers')}"

    def find(pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        return next((r for r in rows if pred(r)), None)

    out = []
    batch = find(lambda r: r["scenario"] == "store_batch100" and r["concurrency"] == 1)
    if batch is None:
        out.append(_missing(*targets["batch"], source))
    else:
        met, ratio = _at_most(float(batch["p50_ms"]), 300.0)
        out.append(Row(*targets["batch"], f"{batch['p50_ms']:.0f} ms", "", met, source, ratio))
    mix = find(lambda r: r["scenario"] == "mix")
    if mix is None:
        out += [_missing(*targets["mix"], source), _missing(*targets["cpu"], source)]
        return out
    met_rate, ratio = _at_least(float(mix["req_s"]), 500.0)
    met = met_rate and float(mix["p99_ms"]) <= 150.0 and int(mix["errors"]) == 0
    other = mix.get("cpu_percent", {}).get("other")
    noise = f", other processes {other:.0f} % of a core" if other is not None else ""
    out.append(
        Row(
            *targets["mix"],
            f"{mix['req_s']:.0f} req/s, p99 {mix['p99_ms']:.0f} ms, {mix['errors']} errors{noise}",
            "",
            met,
            source,
            ratio,
        )
    )
    per = mix.get("cpu_ms_per_request")
    if per:
        total = sum(float(v) for v in per.values())
        parts = ", ".join(f"{k} {float(v):.2f}" for k, v in per.items())
        met, ratio = _at_most(total, 3.5)
        out.append(Row(*targets["cpu"], f"{total:.2f} ms ({parts})", "", met, source, ratio))
    else:
        out.append(_missing(*targets["cpu"], source))
    return out


def print_table(rows: list[Row]) -> None:
    width = max(len(r.metric) for r in rows)
    print(f"{'metric':<{width}}  {'target':<42} {'met':<5} Engram  [baselines]  (measured by)")
    for r in rows:
        met = "n/a" if r.met is None else ("yes" if r.met else "NO")
        base = f"  [{r.baseline}]" if r.baseline else ""
        print(f"{r.metric:<{width}}  {r.target:<42} {met:<5} {r.engram}{base}  ({r.source})")


SOURCES = ("locomo", "scale-1000000", "mem0", "throughput")


def print_provenance(results: Path) -> None:
    """When, on which commit and by which command each results file was measured, and the span
    between the first and the last (the table's rows are one session's when it is short)."""
    print("\nmeasured:")
    times = []
    for name in SOURCES:
        loaded = _load(results, name)
        stamp = (loaded[1].get("provenance") if loaded else None) or {}
        if not stamp:
            print(f"  {name}.json: {'no provenance stamp' if loaded else 'missing'}")
            continue
        at = datetime.fromisoformat(stamp["measured_at"])
        times.append(at)
        dirty = " + uncommitted changes" if stamp.get("uncommitted_changes") else ""
        print(f"  {name}.json: {stamp['measured_at']} on {stamp['commit']}{dirty}:"
              f" {stamp['command']}")  # fmt: skip
    if len(times) > 1:
        span = max(times) - min(times)
        print(f"  first to last: {span.total_seconds() / 3600:.1f} h")


def plot(results: Path, rows: list[Row], out: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed (pip install -e '.[bench]'): no PNG")
        return False
    fig, (curve, bars) = plt.subplots(1, 2, figsize=(14, 5.5))
    ks = ["R@1", "R@5", "R@10", "R@20"]
    loaded = _load(results, "locomo")
    if loaded is not None:
        for scoring, style in (("default", "-o"), ("first-round", "-s"), ("memoclaw-access", "-^")):
            if scoring in loaded[1]:
                overall = loaded[1][scoring]["table"]["overall"]
                curve.plot(ks, [overall[k] for k in ks], style, label=f"Engram ({scoring})")
    for name, figures in LOCOMO_BASELINES.items():
        curve.plot(ks, [figures[k] for k in ks], "--", alpha=0.7, label=name)
    curve.axhline(0.76, color="grey", linestyle=":", label="target R@10 0.76")
    curve.set_title("LoCoMo dev: evidence recall@k through the API")
    curve.set_ylim(0, 1)
    curve.legend(fontsize=8)
    measured = [r for r in rows if r.ratio is not None]
    labels = [textwrap.shorten(r.metric, 52, placeholder="…") for r in measured]
    values = [min(r.ratio or 0.0, 3.0) for r in measured]
    colours = ["tab:green" if r.met else "tab:red" for r in measured]
    bars.barh(labels, values, color=colours)
    bars.axvline(1.0, color="black", linewidth=1)
    bars.set_title("Engram vs target (>= 1 meets it; capped at 3)")
    bars.invert_yaxis()
    bars.tick_params(axis="y", labelsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = [
        *locomo_rows(args.results),
        *scale_rows(args.results),
        *mem0_rows(args.results),
        *throughput_rows(args.results),
    ]
    print_table(rows)
    print_provenance(args.results)
    (args.results / "summary.json").write_text(
        json.dumps([asdict(r) for r in rows], indent=2) + "\n"
    )
    if plot(args.results, rows, args.results / "summary.png"):
        print(f"wrote {args.results / 'summary.json'} and {args.results / 'summary.png'}")


if __name__ == "__main__":
    main()
