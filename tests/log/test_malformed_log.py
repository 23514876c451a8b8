"""Malformed logs, one class per test: each is read, or refused with a named error at the file and line.

The classes the fuzz test (``test_fuzz_log.py``) found raising bare Python or pyarrow errors, or hanging,
pinned here on hand-written logs so that each has a name and a readable reproduction. The error is raised
where the bad value is read (when the snapshot is built), not by whatever uses it later.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deadline import deadline

from airflow_provider_delta.log import CorruptLogError, DeltaTable, InvalidCommitError, VersionNotFoundError
from airflow_provider_delta.log.commits.conflicts import WinningCommit
from airflow_provider_delta.log.commits.tail import commits_after
from airflow_provider_delta.log.files.last_checkpoint import parse_last_checkpoint

BIG = str(2**63)  # one more than the largest long
FIELD = {"name": "id", "type": "long", "nullable": True, "metadata": {}}
PART = {"name": "p", "type": "integer", "nullable": True, "metadata": {}}
SCHEMA = json.dumps({"type": "struct", "fields": [FIELD, PART]})
PROTOCOL = '{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}'
HANG_S = 60  # a hang guard, not a timing: work proportional to a version number would never finish


def metadata(schema: str = SCHEMA, **fields: str) -> str:
    """A metaData line; ``fields`` are raw JSON texts spliced in (so that they may be malformed)."""
    body = {
        "id": '"0f0f0f0f-0000-0000-0000-000000000000"',
        "format": '{"provider":"parquet","options":{}}',
        "schemaString": json.dumps(schema),
        "partitionColumns": '["p"]',
        "configuration": "{}",
        **fields,
    }
    return '{"metaData":{' + ",".join(f'"{k}":{v}' for k, v in body.items()) + "}}"


def add(path: str = "p=1/a.parquet", **fields: str) -> str:
    body = {"path": json.dumps(path), "partitionValues": '{"p":"1"}', "size": "10", "modificationTime": "1",
            "dataChange": "true", **fields}  # fmt: skip
    return '{"add":{' + ",".join(f'"{k}":{v}' for k, v in body.items()) + "}}"


def write_log(root: Path, *commits: list[str] | bytes) -> Path:
    """Commits 0, 1, ... with these lines (or raw bytes); returns the log directory."""
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    for version, lines in enumerate(commits):
        data = lines if isinstance(lines, bytes) else "\n".join(lines).encode() + b"\n"
        (log / f"{version:020d}.json").write_bytes(data)
    return log


def refused(root: Path, *, file: str, line: int | None, says: str) -> CorruptLogError:
    """Reading the table (its snapshot, then its file list, which is read when first asked for) raises
    CorruptLogError naming ``file`` (and ``line``) and saying ``says``."""
    with pytest.raises(CorruptLogError) as caught:
        DeltaTable(str(root)).snapshot().files  # noqa: B018
    err = caught.value
    assert err.path == str(root / "_delta_log" / file), str(err)
    assert err.line == line, str(err)
    assert says in str(err)
    return err


# -- metaData.schemaString ("Schema Serialization Format") ------------------------------------------------
def test_schema_string_that_is_not_json(tmp_path: Path):
    write_log(tmp_path, [PROTOCOL, metadata("{not json")])
    refused(tmp_path, file=f"{0:020d}.json", line=2, says="schemaString is not valid JSON")


@pytest.mark.parametrize("schema", ["[]", "7", '"struct"', '{"type":"array","elementType":"long"}'])
def test_schema_string_that_is_not_a_struct(tmp_path: Path, schema: str):
    write_log(tmp_path, [PROTOCOL, metadata(schema)])
    refused(tmp_path, file=f"{0:020d}.json", line=2, says="must encode a struct type")


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ('{"a":1}', "must encode a struct type"),
        ("[7]", "must be an object with a name and a type"),
        ('[{"name":7,"type":"long"}]', "must be an object with a name and a type"),
        ('[{"name":"a"}]', "must be an object with a name and a type"),
        ('[{"name":"a","type":"long","nullable":"yes"}]', "nullable must be true or false"),
        ('[{"name":"a","type":"long","metadata":[]}]', "metadata must be an object"),
    ],
)
def test_schema_fields_of_the_wrong_shape(tmp_path: Path, fields: str, says: str):
    write_log(
        tmp_path,
        [
            PROTOCOL,
            metadata('{"type":"struct","fields":' + fields + "}"),
        ],
    )
    refused(tmp_path, file=f"{0:020d}.json", line=2, says=says)


@pytest.mark.parametrize(
    ("column", "says"),
    [
        ({"name": "a", "type": "bogus"}, "column 'a' has the unknown type 'bogus'"),
        ({"name": "a", "type": {"type": "array", "elementType": "bogus"}}, "column 'a.element'"),
        (
            {
                "name": "a",
                "type": {
                    "type": "struct",
                    "fields": [
                        {
                            "name": "b",
                            "type": {"type": "map", "keyType": "string", "valueType": {"type": "geometry"}},
                        }
                    ],
                },
            },
            "column 'a.b.value'",
        ),  # fmt: skip
        ({"name": "a", "type": "decimal(50,2)"}, "precision must be 1..38"),
    ],
)
def test_unknown_and_nested_unknown_types(tmp_path: Path, column: dict, says: str):
    schema = json.dumps({"type": "struct", "fields": [FIELD, PART, column]})
    write_log(tmp_path, [PROTOCOL, metadata(schema)])
    refused(tmp_path, file=f"{0:020d}.json", line=2, says=says)


@pytest.mark.parametrize(
    ("fields", "duplicate"),
    [
        ([FIELD, PART, {**FIELD, "name": "ID"}], "'ID'"),  # as Spark: names are case-insensitive
        ([FIELD, PART, FIELD], "'id'"),
        (
            [
                FIELD,
                PART,
                {"name": "s", "type": {"type": "struct", "fields": [FIELD, {**FIELD, "name": "Id"}]}},
            ],
            "'s.Id'",
        ),  # fmt: skip
    ],
)
def test_duplicate_columns(tmp_path: Path, fields: list, duplicate: str):
    write_log(tmp_path, [PROTOCOL, metadata(json.dumps({"type": "struct", "fields": fields}))])
    refused(tmp_path, file=f"{0:020d}.json", line=2, says=f"duplicate column {duplicate}")


def test_only_the_winning_schema_is_checked(tmp_path: Path):
    """A schema replaced by a later metaData is never used, so it does not make the table unreadable."""
    write_log(tmp_path, [PROTOCOL, metadata("{not json")], [metadata(), add()])
    assert DeltaTable(str(tmp_path)).snapshot().schema.names == ["id", "p"]


# -- partition columns ------------------------------------------------------------------------------------
def test_partition_column_missing_from_the_schema(tmp_path: Path):
    write_log(tmp_path, [PROTOCOL, metadata(partitionColumns='["p", "q"]')])
    refused(tmp_path, file=f"{0:020d}.json", line=2, says="partition column 'q' is not in the table schema")


def test_partition_column_of_a_nested_type(tmp_path: Path):
    nested = {"name": "s", "type": {"type": "struct", "fields": [FIELD]}}
    schema = json.dumps({"type": "struct", "fields": [FIELD, nested]})
    write_log(tmp_path, [PROTOCOL, metadata(schema, partitionColumns='["s"]')])
    refused(tmp_path, file=f"{0:020d}.json", line=2, says="partition column 's' has type")


@pytest.mark.parametrize("value", ["abc", "99999999999999999999", "1.5", "2147483648"])
def test_partition_value_that_does_not_parse_names_the_data_file_and_value(tmp_path: Path, value: str):
    bad = add("p=x/b.parquet", partitionValues=json.dumps({"p": value}))
    write_log(tmp_path, [PROTOCOL, metadata(), add()], [bad])
    snap = DeltaTable(str(tmp_path)).snapshot()  # the values are strings until they are typed
    with pytest.raises(CorruptLogError) as caught:
        snap.partition_values()
    assert caught.value.path == "p=x/b.parquet"
    assert f"partition value {value!r} for column 'p'" in str(caught.value)


# -- numbers out of range: versions, sizes, timestamps ----------------------------------------------------
@pytest.mark.parametrize(
    ("line", "says"),
    [
        (add(size=BIG), "add action with a value of the wrong type or out of range"),
        (add(size="1e400"), "add action with a value of the wrong type or out of range"),
        (add(modificationTime=BIG), "add action with a value of the wrong type or out of range"),
        (add(size="Infinity"), "add action with a value of the wrong type or out of range"),
        (
            '{"remove":{"path":"a","deletionTimestamp":' + BIG + "}}",
            "remove action with a value of the wrong",
        ),
        ('{"txn":{"appId":"a","version":' + BIG + "}}", "txn.version must be an integer"),
        ('{"txn":{"appId":"a","version":1e400}}', "txn.version must be an integer"),
        ('{"txn":{"appId":"a","version":3,"lastUpdated":Infinity}}', "txn.lastUpdated must be an integer"),
        ('{"protocol":{"minReaderVersion":' + BIG + ',"minWriterVersion":2}}', "protocol.minReaderVersion"),
        ('{"protocol":{"minReaderVersion":1.5,"minWriterVersion":2}}', "protocol.minReaderVersion"),
        ('{"commitInfo":{"inCommitTimestamp":' + BIG + "}}", "commitInfo.inCommitTimestamp"),
        ('{"commitInfo":{"inCommitTimestamp":"noon"}}', "commitInfo.inCommitTimestamp"),
    ],
)
def test_integers_beyond_int64_infinities_and_floats(tmp_path: Path, line: str, says: str):
    write_log(tmp_path, [PROTOCOL, metadata(), add()], [add("p=1/b.parquet"), line])
    refused(tmp_path, file=f"{1:020d}.json", line=2, says=says)


def test_metadata_created_time_beyond_int64(tmp_path: Path):
    write_log(tmp_path, [PROTOCOL, metadata(createdTime=BIG)])
    refused(tmp_path, file=f"{0:020d}.json", line=2, says="metaData.createdTime must be an integer")


@pytest.mark.parametrize(
    "body",
    [
        {"version": 2**63}, {"version": 3, "size": 2**64}, {"version": 3, "parts": -1}, {"version": 3.0},
        {"version": 3, "sizeInBytes": "x"}, {"version": True}, {"version": 3, "checksum": 7}, [3],
    ],
)  # fmt: skip
def test_last_checkpoint_with_out_of_range_fields_is_only_ignored(tmp_path: Path, body, caplog):
    log = write_log(tmp_path, [PROTOCOL, metadata(), add()], [add("p=1/b.parquet")])
    (log / "_last_checkpoint").write_text(json.dumps(body))
    with caplog.at_level(logging.WARNING):
        assert DeltaTable(str(tmp_path)).snapshot().version == 1
    assert "ignoring unreadable" in caplog.text
    assert parse_last_checkpoint(b'{"version":1e400}') is None
    assert parse_last_checkpoint(b'{"version":3,"\\ud800":1,"checksum":"x"}') is None


# -- text that is not UTF-8 ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "line",
    [
        add().encode().replace(b"a.parquet", b"a\xff.parquet"),  # a path
        add().encode().replace(b'{"p":"1"}', b'{"p":"1","k\xc3\x28":"2"}'),  # a partitionValues key
        add().encode().replace(b'{"p":"1"}', b'{"p":"\xed\xa0\x80"}'),  # a surrogate, encoded
        add(path="a\ud800.parquet").encode(),  # a lone surrogate, escaped (json.dumps writes \ud800)
        b'{"txn":{"appId":"\xff","version":1}}',
        b'{"txn":{"appId":"a\xed\xa0\x80b","version":1}}',  # a surrogate, encoded, in a small action
        metadata(id='"a-b"').encode().replace(b"a-b", b"a\xed\xa0\x80b"),  # fuzz: failed checkpoint() only
    ],
)
def test_invalid_utf8_in_paths_and_map_keys(tmp_path: Path, line: bytes):
    write_log(tmp_path, [PROTOCOL, metadata(), add()], b'{"commitInfo":{}}\n' + line + b"\n")
    refused(tmp_path, file=f"{1:020d}.json", line=2, says="")


def test_invalid_utf8_in_a_checkpoint_path_makes_the_checkpoint_unreadable(tmp_path: Path, caplog):
    """Parquet readers do not check UTF-8: replay does, for paths, and falls back to the commits."""
    write_log(tmp_path, [PROTOCOL, metadata(), add()], [add("p=1/b.parquet")])
    t = DeltaTable(str(tmp_path))
    t.checkpoint()
    cp = tmp_path / "_delta_log" / f"{1:020d}.checkpoint.parquet"
    table = pq.read_table(cp)
    adds = table.column("add").combine_chunks()
    paths = adds.field("path")
    validity, offsets, data = paths.buffers()
    broken = pa.Array.from_buffers(pa.string(), len(paths), [validity, offsets, pa.py_buffer(b"\xff" +
                                   data.to_pybytes()[1:])], offset=paths.offset)  # fmt: skip
    children = [broken if f.name == "path" else adds.field(i) for i, f in enumerate(adds.type)]
    new = pa.StructArray.from_arrays(children, names=[f.name for f in adds.type], mask=adds.is_null())
    pq.write_table(table.set_column(table.column_names.index("add"), "add", new), cp)
    with caplog.at_level(logging.WARNING):
        paths = DeltaTable(str(tmp_path)).snapshot().file_paths()
    assert "add.path is not valid UTF-8" in caplog.text
    assert sorted(paths) == ["p=1/a.parquet", "p=1/b.parquet"]


# -- small actions of the wrong type ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('{"txn":{"appId":7,"version":1}}', "txn.appId must be a string"),
        ('{"txn":{"appId":"a","version":"5"}}', "txn.version must be an integer"),
        ('{"txn":7}', "txn must be a JSON object"),
        ('{"domainMetadata":{"domain":7,"configuration":"{}","removed":false}}', "domainMetadata.domain"),
        (
            '{"domainMetadata":{"domain":"d","configuration":{},"removed":false}}',
            "domainMetadata.configuration",
        ),
        ('{"domainMetadata":{"domain":"d","configuration":"{}","removed":"no"}}', "domainMetadata.removed"),
        (metadata(format="7"), "metaData.format must be an object"),
        (metadata(format='{"provider":7}'), "metaData.format.provider must be a string"),
        (metadata(format='{"options":{"a":1}}'), "metaData.format.options must be an object of strings"),
        (metadata(configuration='"x"'), "metaData.configuration must be an object of strings"),
        (metadata(configuration="[]"), "metaData.configuration must be an object of strings"),
        (metadata(configuration='{"a":1}'), "metaData.configuration must be an object of strings"),
        (metadata(partitionColumns='"p"'), "metaData.partitionColumns must be an array of strings"),
        (metadata(partitionColumns="[1]"), "metaData.partitionColumns must be an array of strings"),
        (metadata(id="null"), "metaData.id must be a string"),
        ('{"protocol":{"minReaderVersion":1,"minWriterVersion":2,"writerFeatures":"x"}}', "writerFeatures"),
        ('{"protocol":7}', "protocol must be a JSON object"),
        ('{"commitInfo":{"operation":[]}}', "commitInfo.operation must be a string"),
        ('{"add":7}', "add must be a JSON object"),
    ],
)
def test_wrong_types_in_small_actions(tmp_path: Path, line: str, says: str):
    write_log(tmp_path, [PROTOCOL, metadata(), add()], [add("p=1/b.parquet"), line])
    refused(tmp_path, file=f"{1:020d}.json", line=2, says=says)


def test_metadata_configuration_null_values_are_unset_keys(tmp_path: Path):
    write_log(tmp_path, [PROTOCOL, metadata(configuration='{"delta.appendOnly":null,"a":"b"}'), add()])
    assert DeltaTable(str(tmp_path)).snapshot().configuration == {"a": "b"}


@pytest.mark.parametrize(
    ("configuration", "says"),
    [
        ({"delta.deletedFileRetentionDuration": "soon"}, "delta.deletedFileRetentionDuration"),
        ({"delta.logRetentionDuration": "interval -1 days"}, "delta.logRetentionDuration"),
        ({"delta.checkpointInterval": "often"}, "delta.checkpointInterval"),
        ({"delta.checkpoint.partSize": "0"}, "delta.checkpoint.partSize"),
        ({"delta.columnMapping.mode": "bogus"}, "delta.columnMapping.mode"),
    ],
)
def test_table_properties_the_core_reads_are_checked_at_load(tmp_path: Path, configuration: dict, says: str):
    write_log(tmp_path, [PROTOCOL, metadata(configuration=json.dumps(configuration)), add()])
    refused(tmp_path, file=f"{0:020d}.json", line=2, says=says)


def test_bad_metadata_in_a_checkpoint_falls_back_to_the_commits(tmp_path: Path, caplog):
    write_log(tmp_path, [PROTOCOL, metadata(), add()], [add("p=1/b.parquet")])
    DeltaTable(str(tmp_path)).checkpoint()
    cp = tmp_path / "_delta_log" / f"{1:020d}.checkpoint.parquet"
    table = pq.read_table(cp)
    meta = table.column("metaData").combine_chunks()
    children = [
        pa.array(["{not json"] * len(meta)) if f.name == "schemaString" else meta.field(i)
        for i, f in enumerate(meta.type)
    ]
    new = pa.StructArray.from_arrays(children, names=[f.name for f in meta.type], mask=meta.is_null())
    pq.write_table(table.set_column(table.column_names.index("metaData"), "metaData", new), cp)
    with caplog.at_level(logging.WARNING):
        snap = DeltaTable(str(tmp_path)).snapshot()
    assert "invalid metaData in" in caplog.text and "schemaString is not valid JSON" in caplog.text
    assert snap.version == 1 and snap.num_files == 2


# -- readers other than replay: history, conflicts, tailing -----------------------------------------------
def test_history_names_a_bad_in_commit_timestamp(tmp_path: Path):
    write_log(tmp_path, [PROTOCOL, metadata(), add()], [add("p=1/b.parquet")])
    log = tmp_path / "_delta_log"
    (log / f"{1:020d}.json").write_text('{"commitInfo":{"inCommitTimestamp":"noon"}}\n' + add() + "\n")
    with pytest.raises(CorruptLogError) as caught:
        DeltaTable(str(tmp_path)).history()
    assert caught.value.path == str(log / f"{1:020d}.json") and caught.value.line == 1


@pytest.mark.parametrize(
    "line", ["[1]", '{"add":7}', '{"remove":{"path":7}}', '{"txn":{"appId":"a","version":"x"}}', "{"]
)
def test_a_winning_commit_that_cannot_be_read_names_its_line(line: str):
    with pytest.raises(CorruptLogError) as caught:
        WinningCommit.parse(5, b'{"commitInfo":{}}\n' + line.encode() + b"\n", path="/t/_delta_log/5.json")
    assert caught.value.line == 2 and caught.value.path == "/t/_delta_log/5.json"


@pytest.mark.parametrize("line", ["[1]", '{"add":7}', '{"commitInfo":{"operation":7}}', "{", "\xff"])
def test_tailing_names_a_commit_line_it_cannot_read(tmp_path: Path, line: str):
    log = write_log(tmp_path, [PROTOCOL, metadata(), add()])
    (log / f"{1:020d}.json").write_bytes(
        add("p=1/b.parquet").encode() + b"\n" + line.encode("latin-1") + b"\n"
    )
    with pytest.raises(CorruptLogError) as caught:
        commits_after(DeltaTable(str(tmp_path)), 0, classify=True)
    assert caught.value.path == str(log / f"{1:020d}.json") and caught.value.line == 2


# -- bounded work: versions named by stray files ----------------------------------------------------------
# A version beyond int64 cannot be part of a Delta log (versions are longs everywhere): the file is ignored
# with a warning and the table stays readable. See segment.MAX_VERSION.
@pytest.mark.parametrize(
    "name",
    [
        "99999999999999999999.json",
        "09223372036854775808.json",
        "99999999999999999999.checkpoint.parquet",
        "09223372036854775808.checkpoint.0000000001.0000000001.parquet",
        "99999999999999999999.checkpoint.00000000-0000-0000-0000-000000000000.json",
    ],
)
def test_a_file_named_beyond_int64_is_ignored_with_a_warning(tmp_path: Path, name: str, caplog):
    log = write_log(tmp_path, [PROTOCOL, metadata(), add()], [add("p=1/b.parquet")])
    (log / name).write_bytes((log / f"{1:020d}.json").read_bytes())
    with caplog.at_level(logging.WARNING), deadline(HANG_S, f"a table with {name}"):
        t = DeltaTable(str(tmp_path))
        assert t.snapshot().version == 1
        assert t.snapshot(version=0).version == 0
        assert [h.version for h in t.history()] == [1, 0]
        assert DeltaTable(str(tmp_path)).checkpoint().version == 1
    assert f"ignoring {tmp_path / '_delta_log' / name}: its version is beyond" in caplog.text


def test_a_huge_version_within_int64_is_a_gap_found_without_walking_to_it(tmp_path: Path):
    """09000000000000000000.json ends the log there: the gap after version 1 is reported at once."""
    log = write_log(tmp_path, [PROTOCOL, metadata(), add()], [add("p=1/b.parquet")])
    (log / "09000000000000000000.json").write_text(add("p=1/c.parquet") + "\n")
    with deadline(HANG_S, "a table with 09000000000000000000.json"):
        refused(tmp_path, file=f"{2:020d}.json", line=None, says="the log has a gap: commit 2 is missing")
        assert DeltaTable(str(tmp_path)).snapshot(version=1).version == 1


@pytest.mark.parametrize("version", [10**18, 2**63 - 1, 2**63, 10**30, -1])
def test_time_travel_to_a_huge_or_negative_version_is_version_not_found(tmp_path: Path, version: int):
    write_log(tmp_path, [PROTOCOL, metadata(), add()], [add("p=1/b.parquet")])
    with deadline(HANG_S, f"snapshot(version={version})"), pytest.raises(VersionNotFoundError):
        DeltaTable(str(tmp_path)).snapshot(version=version)


@pytest.mark.parametrize(
    "info",
    [
        '{"operation":"VACUUM START","timestamp":1,"operationParameters":{"specifiedRetentionMillis":1e400}}',
        '{"operation":"VACUUM START","timestamp":1,"operationParameters":{"defaultRetentionMillis":"soon"}}',
    ],
)
def test_a_vacuum_start_with_a_retention_that_is_not_a_number_is_still_read(tmp_path: Path, info: str):
    """The parameters of an operation are free-form; one the core cannot use is not held against the log."""
    write_log(tmp_path, [PROTOCOL, metadata(), add()], ['{"commitInfo":' + info + "}", add("p=1/b.parquet")])
    assert DeltaTable(str(tmp_path)).snapshot().num_files == 2


@pytest.mark.parametrize(
    ("info", "says"),
    [
        ('{"operation":"VACUUM START","timestamp":1e400}', "commitInfo.timestamp must be an integer"),
        ('{"operation":"VACUUM START","operationParameters":[]}', "commitInfo.operationParameters must be"),
    ],
)
def test_commit_info_fields_the_core_reads_are_type_checked(tmp_path: Path, info: str, says: str):
    write_log(tmp_path, [PROTOCOL, metadata(), add()], ['{"commitInfo":' + info + "}", add("p=1/b.parquet")])
    refused(tmp_path, file=f"{1:020d}.json", line=1, says=says)


@pytest.mark.parametrize(
    "configuration",
    [
        {"delta.logRetentionDuration": "forever"},
        {"delta.checkpoint.partSize": "0"},
        {"delta.deletedFileRetentionDuration": "interval -1 days"},
    ],
)
def test_a_writer_never_commits_metadata_that_readers_refuse(tmp_path: Path, configuration: dict):
    schema = pa.schema([("id", pa.int64())])
    with pytest.raises(InvalidCommitError, match="the new metaData would make the table unreadable"):
        DeltaTable.create(str(tmp_path / "t"), schema, configuration=configuration)
    assert not (tmp_path / "t" / "_delta_log" / f"{0:020d}.json").exists()


@pytest.mark.parametrize("kind", ["add", "remove"])
def test_two_json_objects_on_one_line_of_file_actions(tmp_path: Path, kind: str):
    """Arrow's JSON reader takes ``}{`` as two rows; the line is malformed (one action per line), and the
    Python parser names it (found by the fuzz test: an IndexError looking for the line)."""
    action = add("p=1/b.parquet") if kind == "add" else '{"remove":{"path":"p=1/a.parquet"}}'
    write_log(tmp_path, [PROTOCOL, metadata(), add()], [add("p=1/c.parquet"), action + '{"commitInfo":{}}'])
    refused(tmp_path, file=f"{1:020d}.json", line=2, says=f"malformed {kind} action: Extra data")
