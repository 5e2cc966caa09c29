"""`python -m vla_server.bench multimodal`: its command line, and a two-round run on the demo VLA.

The run starts a real node and checks what the benchmark reports, not how fast anything was:
each case's requests must have been served from the source the case is about (vision tower,
prefix cache, embedding cache, as the node counted them), and the JSON and PNG must be written.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tests.support.bench_cli import bench_args
from vla_server.bench import multimodal

ROUNDS = 2


def parse(monkeypatch: pytest.MonkeyPatch, *argv: str) -> argparse.Namespace:
    return bench_args(monkeypatch, multimodal, "multimodal", *argv)


def test_command_line_defaults_and_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    args = parse(monkeypatch)
    assert (args.width, args.height, args.rounds, args.warmup_rounds) == (640, 480, 20, 3)
    assert args.out == Path("bench_out/multimodal")
    args = parse(monkeypatch, "--rounds", "2", "--warmup-rounds", "0", "--out", str(tmp_path))
    assert (args.rounds, args.warmup_rounds, args.out) == (2, 0, tmp_path)


def test_prompts_put_the_instruction_before_the_image():
    """Else a repeated frame with another instruction would be a prefix hit, not a cache one."""
    layout = multimodal.DEFAULT_LAYOUT
    prompts = {layout.prompt.format(instruction=i) for i in layout.instructions}
    before_image = {p.split("<image>")[0] for p in prompts}
    assert len(before_image) == len(layout.instructions)
    assert all(p.split("<image>")[1] for p in prompts), "text after the image: a prefix can hold it"


# The demo writes the instruction before its image; the tiny pi0-FAST puts two cameras first
# under a bidirectional prompt, so another instruction meets only the embedding cache.
@pytest.mark.parametrize("tiny", ["demo", "pi0fast"])
def test_a_short_run_serves_each_case_from_its_cache(monkeypatch, tmp_path: Path, tiny: str):
    args = parse(
        monkeypatch,
        *("--tiny", tiny, "--rounds", str(ROUNDS), "--warmup-rounds", "1", "--frames", "2"),
        *("--torch-threads", "1", "--out", str(tmp_path)),
    )
    monkeypatch.undo()  # the real run
    result = multimodal.run(args)
    rows = {row["case"]: row for row in result["served"]}
    layout = multimodal.layout_of(Path(result["model"]))
    cases = layout.cases
    assert list(rows) == list(cases)
    for case, (_, source) in cases.items():
        row = rows[case]
        assert row["n"] == ROUNDS
        images = ROUNDS * layout.cameras
        assert row["sources"] == {s: images if s == source else 0 for s in multimodal.SOURCES}
        assert row["sources_as_expected"]
    new = rows["new frame"]
    for case in list(cases)[1:]:
        for key in ("ttft_ratio_p50", "ttft_ratio_p99", "ttfa_ratio_p50", "ttfa_ratio_p99"):
            metric, _, q = key.split("_")
            assert rows[case][key] == pytest.approx(
                rows[case][f"{metric}_{q}"] / new[f"{metric}_{q}"]
            )
    # The same prompt again: the prefix reaches past the image; another instruction: not into it.
    repeat, other = rows["repeated frame, same prompt"], rows["repeated frame, other instruction"]
    assert repeat["cached_tokens_p50"] > other["cached_tokens_p50"]
    stages = {s["stage"]: s for s in result["pipeline_ms"]}
    assert {"total (ImagePipeline.process)", "base64 + JPEG decode", "hash"} <= set(stages)
    assert all(s["n"] == 2 and s["p50"] > 0 for s in stages.values())
    name = Path(result["model"]).name
    assert json.loads((tmp_path / f"multimodal-{name}.json").read_text()) == result
    assert (tmp_path / f"multimodal-{name}.png").stat().st_size > 0
