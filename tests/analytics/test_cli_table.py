"""`logstat table` and `logstat table --update` through the real console entry point."""

import re
import subprocess
import sys

import pytest

from tests.conftest import FIXTURES, SEED_DOC


def logstat(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from logstat.cli import main; main()", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
    )


def test_table_of_the_real_logs_shows_52_8_for_the_megatron_run(real_logs):
    r = logstat("table", str(real_logs))
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("|")]
    meg = [line for line in rows if "meg_gpt2_perf_n16.out" in line]
    assert len(meg) == 1
    cells = [c.strip() for c in meg[0].strip("|").split("|")]
    # The seed's row: | 64 | 52B | 1 | 16 | 256 | 4 | 1024 | 129s | 52.8 | 05-25 |
    assert cells[:9] == ["64", "52B", "1", "16", "256", "4", "1024", "129s", "52.8"]
    assert re.search(r"\|\s*52\.8\s*\|", meg[0])
    # every run of the folder is in a table, failed or not (never dropped)
    for name in (
        "hf_ds_gpt2_perf_n16_bs4-mbs8",
        "meg_ds_3d_gpt2_perf_n16-ds-on",
        "meg_ds_zero_gpt2_perf_n16_nbs48_ms48",
    ):
        assert sum(name in line for line in rows) == 1, name
    # valid GitHub markdown: every table line of a table has the header's number of cells
    for block in re.split(r"\n\s*\n", r.stdout):
        table = [line for line in block.splitlines() if line.startswith("|")]
        if table:
            assert re.fullmatch(r"\|( -+:? \|)+", table[1])
            assert len({len(re.split(r"(?<!\\)\|", line)) for line in table}) == 1
    # table never imports altair (only plot does)
    probe = "import sys; from logstat.cli import main\ntry: main()\nexcept SystemExit: pass\nprint('altair' in sys.modules, file=sys.stderr)"
    r2 = subprocess.run(
        [sys.executable, "-c", probe, "table", str(real_logs)], capture_output=True, text=True
    )
    assert r2.stderr.strip().endswith("False")


def test_update_on_the_pristine_seed_changes_no_byte(tmp_path):
    if not SEED_DOC.is_file():
        pytest.skip("seed document absent")
    doc = tmp_path / "gpt2.md"
    doc.write_bytes(SEED_DOC.read_bytes())
    r = logstat("table", "--update", str(doc))
    assert r.returncode == 0, r.stderr
    assert doc.read_bytes() == SEED_DOC.read_bytes()
    assert r.stdout == ""
    assert f"{doc}:279: left alone: Throughput 'OOM' is not a time in seconds like 129s" in r.stderr
    assert "11 TFlops tables, 64 rows read, changed 0, left alone 3 unreadable" in r.stderr


def test_update_restores_altered_cells_and_lists_exactly_those_rows(tmp_path):
    if not SEED_DOC.is_file():
        pytest.skip("seed document absent")
    seed = SEED_DOC.read_text(encoding="utf-8")
    lines = seed.split("\n")
    # 1-based lines 73 (| 0.661s | 23.2 |), 108 (| 82s | 62.3 |), 315 (| 183s | 27.9 |)
    altered = list(lines)
    altered[72] = altered[72].replace("|   23.2 |", "|   32.2 |")
    altered[107] = altered[107].replace("|   62.3 |", "|    0.0 |")
    altered[314] = altered[314].replace("|   27.9 |", "|   27.8 |")
    doc = tmp_path / "gpt2.md"
    doc.write_text("\n".join(altered), encoding="utf-8")
    r = logstat("table", "--update", str(doc))
    assert r.returncode == 0, r.stderr
    assert doc.read_text(encoding="utf-8") == seed
    assert [line.split(": TFlops ")[0] for line in r.stdout.splitlines()] == [
        f"{doc}:{n}" for n in (73, 108, 315)
    ]
    assert f"{doc}:73: TFlops 32.2 -> 23.2 (-9.0)" in r.stdout
    assert f"{doc}:108: TFlops 0.0 -> 62.3 (+62.3)" in r.stdout
    assert f"{doc}:315: TFlops 27.8 -> 27.9 (+0.1)" in r.stdout


def test_update_errors(tmp_path):
    r = logstat("table", "--update", str(tmp_path / "missing.md"))
    assert (r.returncode, r.stderr.strip()) == (
        1,
        f"Error: logstat table --update: {tmp_path / 'missing.md'}: no such file",
    )
    plain = tmp_path / "plain.md"
    plain.write_text("# no tables\n")
    r = logstat("table", "--update", str(plain))
    assert (
        r.returncode == 1 and "no table with GPUs, Size, Glob-BS, Throughput and TFlops columns" in r.stderr
    )
    assert plain.read_text() == "# no tables\n"
    r = logstat("table", "x", "--update", str(plain))
    assert r.returncode == 1 and "not both" in r.stderr


def test_table_errors(tmp_path):
    r = logstat("table", cwd=tmp_path)
    assert r.returncode == 1 and "give the log files or directories to read" in r.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    r = logstat("table", str(empty))
    assert (r.returncode, r.stdout, r.stderr) == (
        1,
        "",
        f"Error: logstat table: no log files under {empty}\n",
    )
    r = logstat("table", str(tmp_path / "nope"))
    assert r.returncode == 1 and "nope" in r.stderr and "Traceback" not in r.stderr
    r = logstat("table", str(tmp_path), "--columns", "GPUs,Speed")
    assert r.returncode == 1 and "unknown column(s) Speed" in r.stderr


def test_help_has_an_example():
    r = logstat("table", "--help")
    assert r.returncode == 0 and "Example:" in r.stdout and "logstat table --update gpt2.md" in r.stdout


def test_update_of_a_table_logstat_printed_changes_nothing(tmp_path):
    # megatron_lm_h100-2001.out: seq 2048, 6.66B parameters; recomputed from the printed cells with
    # the seed's seq 1024 its 374.5 TFlops would become 188.5 (and 376.9 with its own seq 2048)
    printed = logstat("table", str(FIXTURES / "megatron"))
    assert printed.returncode == 0, printed.stderr
    assert "| 2048 |" in printed.stdout and "374.5" in printed.stdout
    doc = tmp_path / "a.md"
    doc.write_text(printed.stdout, encoding="utf-8")
    r = logstat("table", "--update", str(doc))
    assert r.returncode == 0, r.stderr
    assert doc.read_text(encoding="utf-8") == printed.stdout
    assert r.stdout == ""
    assert "the rounded cells give 376.9 (seq 2048, factor 4): regenerate the table from the logs" in r.stderr
    assert "changed 0, left alone 0 unreadable, 1 generated from logs (regenerate those)" in r.stderr


RUN_DIR = FIXTURES / "runs" / "gpt2-tiny-ddp-powersgd" / "20261125T012907Z-6cbe0f"


def test_a_local_ddp_run_has_its_own_section_and_is_named_by_spec_and_run_id():
    # its train.log is in Megatron's format; its manifest says stack ddp-powersgd and spec
    # gpt2-tiny-ddp-powersgd, and the run directory is 20261125T012907Z-6cbe0f
    r = logstat("table", str(FIXTURES / "runs"), str(FIXTURES / "megatron" / "meg_gpt2_perf_n16.out"))
    assert r.returncode == 0, r.stderr
    sections = re.findall(r"^### (.*)$", r.stdout, re.MULTILINE)
    assert sections == ["Megatron", "PyTorch DDP + PowerSGD"]
    ddp = r.stdout.split("### PyTorch DDP + PowerSGD")[1]
    # 110,336 parameters (the log's own count); 2 GPUs, DP 2, micro batch 2, global batch 8, seq 32;
    # the median of steps 2-5 (176.1, 230.8, 128.4, 96.5 ms) is 152.25 ms;
    # TFlops 0.000110336 * 4 * 2 * 32 * 8 / (0.15225 * 2 * 1e3) = 0.000742
    assert (
        "|    2 | 110K |   2 |      2 |       8 |  32 |     0.152s | 0.000742 | gpt2-tiny-ddp-powersgd/20261125T012907Z-6cbe0f |"
        in ddp
    )
    assert "train.log" not in r.stdout


def test_parse_names_the_run_and_its_iterations_by_spec_and_run_id():
    r = logstat("parse", str(RUN_DIR))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[2].split()[0] == "gpt2-tiny-ddp-powersgd/20261125T012907Z-6cbe0f"
    r = logstat("parse", str(RUN_DIR), "--iterations")
    rows = [line.split()[0] for line in r.stdout.splitlines()[2:]]
    assert rows == ["gpt2-tiny-ddp-powersgd/20261125T012907Z-6cbe0f"] * 5


def test_a_runs_warnings_reach_stderr_as_parse_says_them(tmp_path):
    # the same log twice: parse warns that its steps are another row's too; the table's cells cannot say so
    log = (FIXTURES / "megatron" / "megatron_lm_h100-2001.out").read_text()
    for copy in ("a", "b"):
        (tmp_path / copy).mkdir()
        (tmp_path / copy / "megatron_lm_h100-2001.out").write_text(log)
    table = logstat("table", str(tmp_path))
    parse = logstat("parse", str(tmp_path))
    assert table.returncode == parse.returncode == 0
    warnings = [line for line in parse.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 2 and "5 of its 5 timed steps are also in" in warnings[0]
    assert [line for line in table.stderr.splitlines() if line.startswith("warning: ")] == warnings
