"""Lines -> records, in polars: the records of the lines that hold a marker, and what each record is.

Many ranks write one file: launchers prefix each rank's line (``12: ``, ``[default3]:``, ``10.0.0.2: ``),
ranks writing at once glue their records behind such tags, progress bars end theirs with a carriage
return (or none: the next write is glued to the bar). A record is one rank's text, prefixes stripped,
tagged per family with its record kind (``kinds.RecordKind``) or -1: a record for the family's Python code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import polars as pl
from logstat.parsers.base import Family
from logstat.parsers.kinds import (
    MAX_RECORD,
    PYTHON_SPACE,
    RECORD_SHIFT,
    Block,
    RecordKind,
    RecordTest,
    literals,
)
from logstat.parsers.source import ESCAPE, Batch

_DIGIT = r"\d"  # Rust's \d is Unicode's decimal digits, as Python's
#: a record's stacked launcher prefixes, each after any whitespace: torchrun's ``[default3]:``, ``[rank7]:``,
#: ``srun --label``'s ``12: ``, pdsh/DeepSpeed's runner (``10.0.0.2: ``, ``localhost: ``, ``node12: ``),
#: Open MPI's ``--tag-output`` (``[1,5]<stderr>:``: job, rank, stream; SageMaker's ``[1,mpirank:5,algo-2]<stderr>:``
#: with the host; horovodrun's in Gloo mode: ``[5]<stderr>:``, the rank), MPICH's and Intel MPI's
#: ``-prepend-rank`` (``[13] ``) and a wrapper's (``sed "s/^/[rank $RANK] /"``: ``[rank 13] ``; not
#: Megatron's and DeepSpeed's own ``[Rank 0] ``); the time a line was logged at, by ``docker logs -t`` /
#: ``kubectl logs --timestamps`` (RFC 3339: ``2024-03-02T10:11:12.123456789Z ``), Python logging's ``asctime`` (``2024-03-02
#: 10:11:12,345 ``) or in brackets (``[2024-03-02 10:11:12] ``, DeepSpeed's logger: ``[2024-03-02 10:11:12,345] ``),
#: with journald's host and process after it (``journalctl -o short-iso``: ``2024-06-01T10:00:09+0000
#: node07 python[4321]: ``, ``... node07 kernel: ``); moreutils ``ts``'s default and syslog's (``Mar 05
#: 14:20:02 ``, journalctl's default ``Mar 05 14:20:02 node07 python[4321]: ``); and the source a cluster's or a cloud's launcher
#: names: ``kubectl logs --prefix`` (``[pod/gpt-master-0/pytorch] ``), Ray's workers (``(RayTrainWorker
#: pid=12345, ip=10.0.0.12) ``), SkyPilot's nodes (``(head, rank=0, pid=4012) ``, ``(task, pid=1234) ``),
#: ``docker compose logs`` (``trainer-1  | ``); a platform's export: ``aws logs tail``'s time and log stream
#: (``2023-11-07T18:02:15.746851+00:00 llama2-13b-2023-11-07-17-55-31-881/algo-1-1699380091 ``: SageMaker's
#: job and host), ``gcloud ai custom-jobs stream-logs``' severity, time and task (``INFO<tab>2024-08-20
#: 06:00:10 +0000<tab>workerpool0-0<tab>``), Determined's trial logs (``[2023-08-14T10:20:04.147960Z] a3e1f2b9
#: [rank=0] || ``: the container, the rank)
_DATE_TIME = rf"{_DIGIT}{{4}}-{_DIGIT}{{2}}-{_DIGIT}{{2}}[T ]{_DIGIT}{{2}}:{_DIGIT}{{2}}:{_DIGIT}{{2}}"
_MONTHS = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
_SYSLOG_TIME = rf"(?:{_MONTHS}) [ {_DIGIT}]{_DIGIT} {_DIGIT}{{2}}:{_DIGIT}{{2}}:{_DIGIT}{{2}}"
_JOURNAL_SOURCE = rf"(?: [A-Za-z0-9][\w.-]* (?:[\w.@/-]+\[{_DIGIT}+\]|kernel):)?"
_ZONE = rf"(?:Z|[+-]{_DIGIT}{{2}}:?{_DIGIT}{{2}})"
_SEVERITY = "DEFAULT|DEBUG|INFO|NOTICE|WARNING|ERROR|CRITICAL|ALERT|EMERGENCY"
_PLATFORM_EXPORT = (
    rf"{_DATE_TIME}[.,]{_DIGIT}+{_ZONE} [\w.-]+/[\w./-]+ "
    rf"|(?:{_SEVERITY})\t{_DATE_TIME} [+-]{_DIGIT}{{4}}\t[\w.-]*\t"
    rf"|\[{_DATE_TIME}[.,]{_DIGIT}+Z\] [0-9a-f]{{8}} (?:\[rank={_DIGIT}+\] )?\|\| "
)
LEADING_PREFIX = (
    rf"^(?:{PYTHON_SPACE}*(?:\[(?:default|rank){_DIGIT}+\]:|\[(?:{_DIGIT}+,)?(?:mpirank:)?{_DIGIT}+(?:,[\w.-]+)?\]<std(?:out|err)>:|{_DIGIT}{{1,5}}: |(?:{_DIGIT}{{1,3}}\.){{3}}"
    rf"{_DIGIT}{{1,3}}: |{_PLATFORM_EXPORT}|localhost: |[a-z][a-z0-9-]*{_DIGIT}[a-z0-9-]*(?:\.[a-z0-9.-]+)?: |\[(?:rank )?{_DIGIT}{{1,6}}\] "
    rf"|{_DATE_TIME}(?:[.,]{_DIGIT}+)?{_ZONE}?{_JOURNAL_SOURCE} "
    rf"|{_SYSLOG_TIME}(?:[.,]{_DIGIT}+)?{_JOURNAL_SOURCE} "
    rf"|\[{_DATE_TIME}(?:[.,]{_DIGIT}+)?\] |\[pod/[^\]\s]+\] |\((?:[\w.-]+,? )?(?:rank={_DIGIT}+, )?pid={_DIGIT}+(?:, ip=[\d.:]+)?\) "
    rf"|[\w.-]*[-_]{_DIGIT}+ +\| ))+"
)
#: a bracketed tag: unambiguous, so a line holding one after its first character glues ranks' records
GLUED_TAG = rf"\[(?:default|rank){_DIGIT}+\]:"
#: a tqdm update (``| 12/100 [00:45<05:30, 3.42s/it, loss=9.63]``, its padding) and what the next write glued to
#: it: tqdm ends no update with a newline, so a log line or a traceback printed next starts right after it
GLUED_TO_BAR = r"(\| *\d+/\d+ \[[^\]\r]*\]) *([^\s\r])"


#: where a structured log's line holds the program's text: Google Cloud Logging's export (``textPayload``, a
#: structured entry's ``jsonPayload.message``), docker's json-file driver and Kubernetes' collectors
#: (``{"log":"...\\n","stream":"stdout",...}``), CloudWatch's and JSON loggers' ``message``
JSON_TEXT_PATHS = ("$.textPayload", "$.jsonPayload.message", "$.log", "$.message")
#: an export's entry pretty-printed (the Cloud Logging console's download, ``aws logs get-log-events``): the
#: line of its text field
PRETTY_TEXT_FIELD = r'^\s*"(?:textPayload|message)": "'
#: a Kaggle notebook's ``__results__.log``: a JSON array of its output's writes, one a line (``[{"stream_name":
#: "stdout", "time": 9.5, "data": "...\n"}``, then ``,{"stream_name": ...}``, the last closing it)
KAGGLE_ENTRY = '{"stream_name": '


def split_records(lines: pl.LazyFrame, separator: str) -> pl.LazyFrame:
    """The non-blank records of ``lines`` (``run``, ``row``, ``order`` with the record's index in its
    line, ``text`` without prefixes), not in line order; ``separator``: a character no line holds. A
    structured log's line is its text (JSON_TEXT_PATHS, escapes decoded, colour codes dropped). Only
    lines with a carriage return, a newline (a structured line's), a ``]:`` (a tag) or a ``%|`` (a bar) are split."""
    text = pl.col("text")
    # an entry a line, or an export's entries pretty-printed: their text field's line, as an entry of its own
    pretty = text.str.contains(PRETTY_TEXT_FIELD)
    kaggle = text.str.starts_with(f"[{KAGGLE_ENTRY}") | text.str.starts_with(f",{KAGGLE_ENTRY}")
    entries = pl.when(pretty).then(pl.concat_str(pl.lit("{"), text.str.strip_chars_end(", \t"), pl.lit("}")))
    entries = entries.when(kaggle).then(text.str.slice(1).str.strip_chars_end("] \t"))
    wrapped = text.str.starts_with('{"') | pretty | kaggle
    written = pl.when(kaggle).then(entries.str.json_path_match("$.data"))
    found = (entries.otherwise(text).str.json_path_match(path) for path in JSON_TEXT_PATHS)
    unwrapped = pl.coalesce(written, *found, text).str.replace_all(ESCAPE, "")
    lines = pl.concat([lines.filter(~wrapped), lines.filter(wrapped).with_columns(text=unwrapped)])
    several = text.str.contains(literals(("\r", "\n", "]:", "%|")))  # a bar: the next write glued to it
    single = lines.filter(~several).select("run", "row", "order", text=text.str.replace(LEADING_PREFIX, ""))
    pieces = (
        text.str.replace_all(GLUED_TAG, separator + "${0}")
        .str.replace_all(GLUED_TO_BAR, "${1}" + separator + "${2}")
        .str.replace_all("\r", separator, literal=True)
        .str.replace_all("\n", separator, literal=True)
    )
    run, order, position = pl.col("run"), pl.col("order"), pl.int_range(pl.len())
    first = ((order != order.shift(1)) | (run != run.shift(1))).fill_null(True)
    last = ((order != order.shift(-1)) | (run != run.shift(-1))).fill_null(True)
    # a line of more records than an order counts (a bar's updates, carriage returns between): those past
    # the count share one order, and the line's last record, a bar's final state, keeps the last
    index = position - pl.when(first).then(position).forward_fill()
    index = (
        pl.when(last & (index >= MAX_RECORD))
        .then(MAX_RECORD)
        .otherwise(index.clip(upper_bound=MAX_RECORD - 1))
    )
    split = (
        lines.filter(several)
        .select("run", "row", "order", piece=pieces.str.split(separator))
        .explode("piece")
        .select("run", "row", "order", text=pl.col("piece").str.replace(LEADING_PREFIX, ""))
        .filter(text.str.contains(NOT_BLANK))
        .with_columns(order=order + index * (1 << RECORD_SHIFT))
    )
    return pl.concat([single.filter(text.str.contains(NOT_BLANK)), split])


#: a record holding more than Python's whitespace
NOT_BLANK = r"[^\s\x1c-\x1f]"


def passes(test: RecordTest | None) -> pl.Expr:
    """Whether a record's ``text`` passes ``test`` (none: never)."""
    return test.expr(pl.col("text")) if test is not None else pl.lit(False)


def _all_markers(family: Family) -> tuple[str, ...]:
    """The family's markers and its blocks' (their openers' too), once each: a record holding only a
    block's is the block's alone, never ``parse_line``'s."""
    blocks = (marker for block in family.blocks for marker in (*block.markers, *block.opens.markers))
    return tuple(dict.fromkeys((*family.markers, *blocks)))


@dataclass
class ReadGroup:
    """One read shared by blocks and kinds (indexes into ``Plan.blocks`` and ``Plan.kinds``): their
    records are kept together and read in line order, in segments that end before a block still open."""

    read: object
    blocks: list[int] = field(default_factory=list)
    kinds: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Plan:
    """The active families' markers, kinds and blocks, with the polars expressions built from them once."""

    families: tuple[Family, ...]

    @cached_property
    def kinds(self) -> tuple[RecordKind, ...]:
        return tuple(kind for family in self.families for kind in family.kinds)

    @cached_property
    def blocks(self) -> tuple[Block, ...]:
        return tuple(block for family in self.families for block in family.blocks)

    @cached_property
    def blocks_by_family(self) -> dict[str, list[int]]:
        """The indexes (into ``blocks``) of each family's blocks, by family name."""
        found: dict[str, list[int]] = {}
        for number, block in enumerate(self.blocks):
            found.setdefault(block.family, []).append(number)
        return found

    @cached_property
    def marked(self) -> pl.Expr:
        """Whether a line holds any family's marker (its blocks' included)."""
        markers = tuple(dict.fromkeys(marker for family in self.families for marker in _all_markers(family)))
        return pl.col("text").str.contains(literals(markers)) if markers else pl.lit(False)

    @cached_property
    def tags(self) -> list[tuple[pl.Expr, list[pl.Expr]]]:
        """Per family, whether a record holds one of its markers (its blocks' included), and its tags:
        ``f<i>``, the index into ``kinds`` of its first kind, else -1 with one of the family's own markers
        (for ``parse_line``), -2 with only a block's; per block ``j``, whether it opens, ends or closes
        it (``o<j>``, ``e<j>``, ``c<j>``: a closer among the family's marked records bounds the search)."""
        text = pl.col("text")
        found, first, blocks = [], 0, iter(range(len(self.blocks)))
        for number, family in enumerate(self.families):
            markers = _all_markers(family)
            tag = pl.when(pl.lit(False)).then(pl.lit(None, dtype=pl.Int32))
            for index, kind in enumerate(family.kinds, first):
                tag = tag.when(kind.test.expr(text)).then(pl.lit(index, dtype=pl.Int32))
            if len(markers) > len(family.markers):
                own = text.str.contains(literals(family.markers)) if family.markers else pl.lit(False)
                tag = tag.when(~own).then(pl.lit(-2, dtype=pl.Int32))
            columns = [tag.otherwise(pl.lit(-1, dtype=pl.Int32)).alias(f"f{number}")]
            for block, index in zip(family.blocks, blocks, strict=False):
                for name, test in (("o", block.opens), ("e", block.ends), ("c", block.closes)):
                    columns.append(passes(test).alias(f"{name}{index}"))
            found.append((text.str.contains(literals(markers)) if markers else pl.lit(False), columns))
            first += len(family.kinds)
        return found

    def number(self, name: str) -> int:
        """The index of the family called ``name``."""
        return next(number for number, family in enumerate(self.families) if family.name == name)

    @cached_property
    def groups(self) -> list[ReadGroup]:
        """The reads of the blocks, with the kinds that share one (``ReadGroup``)."""
        groups: dict[object, ReadGroup] = {}
        for number, block in enumerate(self.blocks):
            into = (
                kind.read for kind in self.kinds if (kind.family, kind.name) == (block.family, block.into)
            )
            read = block.read if block.into is None else next(into)
            groups.setdefault(read, ReadGroup(read=read)).blocks.append(number)
        for index, kind in enumerate(self.kinds):
            if kind.read in groups:
                groups[kind.read].kinds.append(index)
        return list(groups.values())

    @cached_property
    def group_of_kind(self) -> dict[int, int]:
        """The group (index into ``groups``) of each kind read in one; ``group_of_block``: of each block."""
        return {kind: number for number, group in enumerate(self.groups) for kind in group.kinds}

    @cached_property
    def group_of_block(self) -> dict[int, int]:
        return {block: number for number, group in enumerate(self.groups) for block in group.blocks}

    def records(self, batch: Batch) -> pl.DataFrame:
        """The tagged records of the marked lines of a batch (``run``, ``row``, ``order``, ``text``)."""
        # collected first: split_records reads the marked lines twice, and a lazy plan would search
        # every line of the batch for the markers twice
        marked = batch.located(batch.lines.lazy().filter(self.marked)).collect()
        records = split_records(marked.lazy(), batch.separator).collect().with_row_index("record")
        tagged = records.lazy()
        # each family's tests run on its own records only: a join costs less than a test of every record
        for routed, columns in self.tags:
            tagged = tagged.join(
                records.lazy().filter(routed).select("record", *columns), on="record", how="left"
            )
        flags = [f"{name}{index}" for index in range(len(self.blocks)) for name in "oec"]
        return (
            (tagged.with_columns(pl.col(flags).fill_null(False)) if flags else tagged)
            .drop("record")
            .collect()
        )
