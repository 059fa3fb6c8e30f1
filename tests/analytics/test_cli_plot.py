"""`logstat plot` through the real console entry point, on the real logs; altair only where needed."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = (
    "import sys\nfrom logstat.cli import main\ntry:\n    main()\n"
    "finally:\n    print('ALTAIR', 'altair' in sys.modules, file=sys.stderr)"
)


def logstat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True)


def altair_imported(r: subprocess.CompletedProcess) -> bool:
    return re.search(r"ALTAIR (True|False)", r.stderr)[1] == "True"


@pytest.mark.slow  # parses four real logs and renders three charts to PNG and HTML (~10 s)
def test_plot_writes_the_charts_of_the_real_logs(tmp_path, real_logs):
    out = tmp_path / "plots"
    r = logstat("plot", str(real_logs), "--out", str(out))
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        f"{stem}.{fmt}" for stem in ("gpu_days_100b", "loss", "time_breakdown") for fmt in ("html", "png")
    ]
    assert r.stdout.split() == [
        str(out / n) for n in sorted(names, key=lambda n: (n.split(".")[0], n.endswith("png")))
    ]
    for png in out.glob("*.png"):
        assert png.read_bytes()[:4] == b"\x89PNG"
    # the chart's data holds the runs: the Megatron runs with a throughput, at 64 GPUs
    html = (out / "gpu_days_100b.html").read_text()
    spec = json.loads(re.search(r"const spec = (\{.*?\});\n", html, re.S)[1])
    (rows,) = spec["datasets"].values()
    assert "meg_gpt2_perf_n16.out" in {row["run"] for row in rows}
    meg = next(row for row in rows if row["run"] == "meg_gpt2_perf_n16.out")
    assert meg["gpus"] == 64
    # 1024 * 1024 tokens per iteration at ~129 s: ~142 days, ~9100 GPU-days for 100B tokens
    assert meg["gpu_days"] == pytest.approx(64 * 100e9 / (1048576 / meg["sec_per_iter"]) / 86400)
    assert 9000 < meg["gpu_days"] < 9250
    assert altair_imported(r)
    # a second run into the same directory refuses and leaves the files alone
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    r = logstat("plot", str(real_logs), "--out", str(out))
    assert r.returncode == 1
    assert "gpu_days_100b.html exists; logstat never overwrites a file" in r.stderr
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_help_parse_and_table_do_not_import_altair(real_logs):
    r = logstat("--help")
    assert r.returncode == 0
    assert not altair_imported(r)
    r = logstat("plot", "--help")
    assert "Example:" in r.stdout and "never overwritten" in r.stdout
    assert not altair_imported(r)
    for command in ("table", "parse"):
        r = logstat(command, str(real_logs))
        assert r.returncode == 0, r.stderr
        assert not altair_imported(r), command


def test_plot_of_a_missing_path_is_one_line(tmp_path):
    r = logstat("plot", str(tmp_path / "nope"), "--out", str(tmp_path / "p"))
    assert "nope" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "p").exists()


def test_a_format_given_twice_writes_each_chart_once(tmp_path):
    log = Path(__file__).resolve().parents[2] / "fixtures" / "megatron" / "meg_gpt2_perf_n16.out"
    out = tmp_path / "plots"
    r = logstat("plot", str(log), "--out", str(out), "--format", "svg", "--format", "svg")
    assert r.returncode == 0, r.stderr
    written = r.stdout.split()
    assert written == sorted(set(written)) and written and all(name.endswith(".svg") for name in written)
    assert sorted(str(path) for path in out.iterdir()) == written


def test_a_chart_left_out_says_why_in_the_terms_of_every_family(tmp_path):
    log = Path(__file__).resolve().parents[2] / "fixtures" / "mingpt" / "mingpt_zero3_20b.log"
    r = logstat("plot", str(log), "--out", str(tmp_path / "p"), "--format", "svg")
    assert r.returncode == 1 and not (tmp_path / "p").exists()  # nothing to draw: nothing made
    # minGPT logs no timer: the note names both families' timers, not Megatron's alone
    assert (
        "no time_breakdown chart: no timer of a logged step (Megatron's time (ms) lines, DeepSpeed's engine timers)"
        in r.stderr
    )
