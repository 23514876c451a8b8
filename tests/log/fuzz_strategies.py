"""Hypothesis strategies that draw ``Mutation``s for one seed's log (see ``fuzz_mutations``).

The pools of values are what the log must survive: JSON of another type, integers beyond int64, infinities
and NaN (Python's ``json`` writes them as bare tokens, as a broken writer might), lone surrogates, bytes that
are not UTF-8, schemaStrings of every wrong shape, partition values that do not parse, odd file names.
"""

from __future__ import annotations

import json
from typing import Any

from fuzz_mutations import BAD_UTF8_VALUE, DROP, Mutation
from fuzz_seeds import LogFiles
from hypothesis import strategies as st

# JSON text snippets (inserted verbatim, so non-standard tokens and bad escapes survive serialisation).
ODD_JSON_VALUES = (
    "null", "true", "false", "0", "-1", "1.5", "-0.0", '""', '"x"', "[]", "{}", "[1]", '{"a":1}', '[null]',
    str(2**63), str(2**64), str(-(2**63) - 1), str(10**30), "1e400", "-1e400", "Infinity", "-Infinity",
    "NaN", '"\\ud800"', '"\\udc80x"', '"\\u0000"', '"' + "a" * 5000 + '"', '"2024-13-45"', '"-1"',
    '"99999999999999999999"', '{"type":"struct"}', '[[]]', '{"": null}',
)  # fmt: skip
# Raw bytes that are not UTF-8, placed inside a JSON string.
BAD_UTF8 = (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80abc", b"\xf0\x9f")
ODD_SCHEMA_STRINGS = (
    "not json", "", "1", "[]", "null", '"struct"', '{"type":"array","elementType":"long"}',
    '{"type":"struct"}', '{"type":"struct","fields":{}}', '{"type":"struct","fields":[1]}',
    '{"type":"struct","fields":[{"name":1,"type":"long"}]}', '{"type":"struct","fields":[{"name":"a"}]}',
    '{"type":"struct","fields":[{"name":"a","type":"bogus","nullable":true,"metadata":{}}]}',
    '{"type":"struct","fields":[{"name":"a","type":{"type":"array","elementType":"bogus","containsNull":true},'
    '"nullable":true,"metadata":{}}]}',
    '{"type":"struct","fields":[{"name":"a","type":{"type":"struct","fields":[{"name":"b","type":{"type":"map",'
    '"keyType":"string","valueType":"whatever"}}]}}]}',
    '{"type":"struct","fields":[{"name":"a","type":"long"},{"name":"A","type":"string"}]}',
    '{"type":"struct","fields":[{"name":"a","type":"long"},{"name":"a","type":"long"}]}',
    '{"type":"struct","fields":[{"name":"a","type":"decimal(50,2)"}]}',
    '{"type":"struct","fields":[{"name":"a","type":{"type":"map","keyType":[],"valueType":"long"}}]}',
    '{"type":"struct","fields":[{"name":"a","type":"long","metadata":"x"}]}',
    '{"type":"struct","fields":[{"name":"a","type":"long","nullable":"maybe"}]}',
    '{"type":"struct","fields":[{"name":"a","type":{"type":"struct","fields":[{"name":"b","type":"long"},'
    '{"name":"B","type":"long"}]}}]}',
)  # fmt: skip
# Replacements for one node of a parsed schemaString (a type, a name, a flag, a whole field).
SCHEMA_NODE_VALUES = (
    '"bogus"', '"A"', '"a"', '"id"', "7", "null", "[]", "{}", '{"type":"array"}',
    '{"type":"map","keyType":"string"}', '"decimal(39,1)"', '"decimal(5,6)"', '"void"', '"variant"', "true",
    '"string"', '{"type":"struct","fields":[]}',
)  # fmt: skip
ODD_PARTITION_VALUES = ("abc", "", "1.5", "99999999999999999999", "2024-02-30", "2024-13-01", "true", "x y",
                        "1e400", "NaN", "-", "  7 ", "\u00e9")  # fmt: skip
ODD_FILE_NAMES = (
    "99999999999999999999.json", "09223372036854775808.json", "09223372036854775807.json",
    "09223372036854775806.json", "00000000000000001000.json", "99999999999999999999.checkpoint.parquet",
    "09223372036854775808.checkpoint.parquet",
    "00000000000000000001.checkpoint.0000000001.9999999999.parquet",
    "00000000000000000002.checkpoint.0000000000.0000000000.parquet",
    "00000000000000000003.checkpoint.00000000-0000-0000-0000-000000000000.json",
    "00000000000000000003.checkpoint.00000000-0000-0000-0000-000000000000.parquet",
    "0000000000000000000a.json", "1.json", "00000000000000000000.json.tmp", "_last_checkpoint",
    "00000000000000000000.crc", "00000000000000000001.00000000000000000003.compacted.json",
)  # fmt: skip


def _value_mutation(files: LogFiles) -> st.SearchStrategy[Mutation]:
    """Replace, remove or duplicate any JSON value of any action of any JSON file."""
    with_lines = [(n, c) for n, c in files.json_files if c]
    return st.sampled_from(with_lines).flatmap(
        lambda nc: st.builds(
            lambda line, pick, how, value, bad: Mutation(
                "value", nc[0],
                {"line": line, "pick": pick, "how": how,
                 "value": bad if bad is not None else value, "bad_utf8": bad is not None},
            ),
            st.integers(0, max(0, nc[1] - 1)),
            st.integers(0, 200),
            st.sampled_from(["replace", "replace", "replace", "delete", "duplicate_key"]),
            st.sampled_from(ODD_JSON_VALUES),
            st.one_of(st.none(), st.none(), st.sampled_from(BAD_UTF8)),
        )
    )  # fmt: skip


def _json(text: str) -> str:
    return json.dumps(text)


_ACTION_FIELDS: list[tuple[str, str, st.SearchStrategy]] = [
    ("metaData", "schemaString", st.sampled_from(ODD_SCHEMA_STRINGS).map(_json)),
    ("metaData", "schemaString~", st.tuples(st.integers(0, 300), st.sampled_from(SCHEMA_NODE_VALUES))),
    ("metaData", "partitionColumns+", st.sampled_from(["nope", "ID", "s.a", ""])),
    ("metaData", "partitionColumns", st.sampled_from(['"p"', "[1]", "{}", '[["p"]]', "[null]", "7"])),
    ("metaData", "configuration", st.sampled_from(['"x"', "[]", "7", '{"a":1}', '{"a":null}', '{"a":{}}',
                                                   '{"delta.checkpointInterval":"x"}',
                                                   '{"delta.columnMapping.mode":"bogus"}',
                                                   '{"delta.enableInCommitTimestamps":"true"}',
                                                   '{"delta.logRetentionDuration":"soon"}',
                                                   '{"delta.deletedFileRetentionDuration":"1 fortnight"}',
                                                   '{"delta.setTransactionRetentionDuration":[]}'])),
    ("metaData", "format", st.sampled_from(['"parquet"', "7", "[]", '{"provider":7}', '{"options":"x"}',
                                            '{"options":{"a":1}}', '{"provider":"csv"}'])),
    ("metaData", "id", st.sampled_from(["7", "null", "{}"])),
    ("metaData", "createdTime", st.sampled_from([str(2**64), "1e400", '"x"', "-5", "{}"])),
    ("protocol", "minReaderVersion", st.sampled_from([str(2**63), "1e400", "Infinity", '"1"', "-1", "0", "4",
                                                     "1.5", "null", "[]"])),
    ("protocol", "minWriterVersion", st.sampled_from([str(2**64), '"7"', "-1", "null", "{}"])),
    ("protocol", "readerFeatures", st.sampled_from(['"deletionVectors"', "[1]", "{}", '["bogus"]', "7"])),
    ("protocol", "writerFeatures", st.sampled_from(['"x"', "[1]", "{}", '["bogus"]', "7"])),
    ("txn", "version", st.sampled_from([str(2**63), "1e400", '"5"', "null", "[]", "-1", "1.5"])),
    ("txn", "appId", st.sampled_from(["7", "null", "[]", '"\\ud800"'])),
    ("txn", "lastUpdated", st.sampled_from([str(2**64), "Infinity", '"x"', "{}"])),
    ("domainMetadata", "domain", st.sampled_from(["7", "null", "[]"])),
    ("domainMetadata", "configuration", st.sampled_from(["7", "{}", "[]", "null"])),
    ("domainMetadata", "removed", st.sampled_from(['"yes"', "7", "null", "[]"])),
    ("add", "size", st.sampled_from([str(2**63), str(2**64), "1e400", "Infinity", "NaN", "-1", '"12"', "null",
                                     "1.5", "[]"])),
    ("add", "modificationTime", st.sampled_from([str(2**63), "-Infinity", '"x"', "null", "{}", "-1"])),
    ("add", "path", st.sampled_from(["7", "null", '""', '"%zz"', '"a%00b"', '"\\ud800"', "[]"])),
    ("add", "dataChange", st.sampled_from(['"true"', "7", "null"])),
    ("add", "partitionValues", st.sampled_from(ODD_PARTITION_VALUES).map(_json)),
    ("add", "partitionValues.key", st.sampled_from(BAD_UTF8)),
    ("add", "stats", st.sampled_from(["7", '"{"', '"[]"', '"{\\"numRecords\\":\\"x\\"}"', "{}"])),
    ("add", "tags", st.sampled_from(['"x"', "[]", '{"a":1}', '{"a":{}}'])),
    ("add", "deletionVector", st.sampled_from(['"x"', "[]", '{"storageType":7}', '{"offset":"x"}',
                                               '{"storageType":"u","pathOrInlineDv":"ab","sizeInBytes":'
                                               + str(2**40) + ',"cardinality":1}'])),
    ("remove", "deletionTimestamp", st.sampled_from([str(2**63), "1e400", '"x"', "null", "-1"])),
    ("remove", "path", st.sampled_from(["7", "null", '"\\ud800"'])),
    ("commitInfo", "inCommitTimestamp", st.sampled_from([str(2**63), "1e400", '"x"', "null", "-1", "[]"])),
    ("commitInfo", "operation", st.sampled_from(["7", "null", "[]", '"VACUUM START"', '"VACUUM END"'])),
    ("commitInfo", "timestamp", st.sampled_from([str(2**63), "1e400", '"x"', "null", "-1"])),
    ("commitInfo", "operationParameters", st.sampled_from(['"x"', "[]", '{"specifiedRetentionMillis":1e400}',
                                                           '{"defaultRetentionMillis":"x"}'])),
    ("checkpointMetadata", "version", st.sampled_from([str(2**63), '"x"', "null"])),
    ("sidecar", "path", st.sampled_from(["7", "null", '"../../../etc/passwd"', '"nope.parquet"',
                                         '"\\ud800"'])),
    ("sidecar", "sizeInBytes", st.sampled_from([str(2**64), '"x"', "null"])),
]  # fmt: skip


def _action_field_mutation(files: LogFiles) -> st.SearchStrategy[Mutation]:
    """A known field of an action the seed holds, in a file that holds it, set to a value of the wrong
    type, out of range, or that does not parse."""
    fields = [f for f in _ACTION_FIELDS if f[0] in files.actions]
    return st.tuples(st.sampled_from(fields), st.booleans()).flatmap(
        lambda t: st.tuples(st.sampled_from(files.actions[t[0][0]]), t[0][2]).map(
            lambda fv: Mutation(
                "action_field", fv[0], {"action": t[0][0], "key": t[0][1], "value": fv[1], "first_only": t[1]}
            )
        )
    )


def _lines_mutation(files: LogFiles) -> st.SearchStrategy[Mutation]:
    names = [n for n, _ in files.json_files]
    texts = st.sampled_from([b"", b"garbage", b"{", b"[]", b"7", b'{"add":null}', b'{"add":7}', b'{"add":{}}',
                             b'{"remove":[]}', b'{"protocol":7}', b'{"metaData":{}}', b'{"txn":{}}',
                             b'{"add": {"path": "x.parquet"}}', b"\x00\x00", b'{"":{}}',
                             b'{"add":{"path":"a","size":1,"modificationTime":1,"dataChange":true},"remove":{}}',
                             b'{"commitInfo":{"operation":"VACUUM START","timestamp":1,"operationParameters":'
                             b'{"specifiedRetentionMillis":1e400}}}',
                             b'{"commitInfo":{"operation":"VACUUM START","timestamp":1e400}}',
                             b'{"commitInfo":{"operation":"VACUUM START","operationParameters":[]}}',
                             *BAD_UTF8])  # fmt: skip
    return st.builds(
        lambda name, op, i, j, text: Mutation("lines", name, {"op": op, "i": i, "j": j, "text": text}),
        st.sampled_from(names),
        st.sampled_from(["delete", "duplicate", "swap", "insert", "splice"]),
        st.integers(0, 50),
        st.integers(0, 5000),
        texts,
    )


def _file_mutation(files: LogFiles) -> st.SearchStrategy[Mutation]:
    every = list(files.all_files)
    return st.one_of(
        st.builds(
            lambda name, keep: Mutation("truncate", name, {"keep": keep}),
            st.sampled_from(every),
            st.sampled_from([0.0, 0.1, 0.5, 0.9, 0.99]),
        ),
        st.builds(lambda name: Mutation("delete", name), st.sampled_from(every)),
        st.builds(
            lambda name, to, copy: Mutation("rename", name, {"to": to, "copy": copy}),
            st.sampled_from(every),
            st.sampled_from(ODD_FILE_NAMES),
            st.booleans(),
        ),
        st.builds(
            lambda to, directory, content: Mutation(
                "create", to, {"directory": directory, "content": content}
            ),
            st.sampled_from(ODD_FILE_NAMES),
            st.booleans(),
            st.sampled_from([b"", b"{}", b"garbage", b'{"commitInfo":{}}', b"PAR1\x00PAR1"]),
        ),
    )


def _last_checkpoint_mutation(files: LogFiles) -> st.SearchStrategy[Mutation]:
    bodies = st.sampled_from([
        b"", b"garbage", b"[]", b"7", b"\xff\xfe", b'{"version":"3"}', b'{"version":-1}',
        b'{"version":' + str(2**63).encode() + b"}", b'{"version":' + str(2**64).encode() + b"}",
        b'{"version":1e400}', b'{"version":Infinity}', b'{"version":NaN}', b'{"version":3.0}',
        b'{"version":999999}', b'{"version":0,"parts":0}',
        b'{"version":3,"parts":' + str(2**63).encode() + b"}",
        b'{"version":3,"size":-1,"sizeInBytes":"x","numOfAddFiles":1e400}', b'{"version":3,"parts":"two"}',
        b'{"version":true}', b'{"version":3,"checksum":7}', b'{"version":3,"v2Checkpoint":7}',
        b'{"version":3,"checkpointSchema":"x"}', b'{"version":3,"tags":[]}', b'{"version":null}',
    ])  # fmt: skip
    return bodies.map(lambda b: Mutation("last_checkpoint", "_last_checkpoint", {"content": b}))


_PARQUET_EDITS: list[tuple[str, str, Any]] = [
    ("add", "size", "12"), ("add", "size", None), ("add", "path", 7), ("add", "path", None),
    ("add", "partitionValues", "x"), ("add", "partitionValues", 7), ("add", "modificationTime", "x"),
    ("add", "stats", 7), ("add", "deletionVector", "x"), ("add", "tags", 7), ("add", "dataChange", "x"),
    ("add", "path", DROP), ("add", "path", BAD_UTF8_VALUE), ("add", "partitionValues", BAD_UTF8_VALUE),
    ("remove", "path", BAD_UTF8_VALUE), ("metaData", "schemaString", BAD_UTF8_VALUE),
    ("txn", "appId", BAD_UTF8_VALUE), ("add", "*", 7), ("add", "*", "x"),
    ("remove", "deletionTimestamp", "x"), ("remove", "path", 5), ("remove", "*", 1.5),
    ("metaData", "schemaString", "not json"), ("metaData", "schemaString", '{"type":"struct","fields":7}'),
    ("metaData", "schemaString", 7), ("metaData", "partitionColumns", "p"),
    ("metaData", "configuration", "x"),
    ("metaData", "configuration", 7), ("metaData", "format", "parquet"), ("metaData", "id", None),
    ("metaData", "*", "x"), ("metaData", "createdTime", "x"),
    ("protocol", "minReaderVersion", "1"), ("protocol", "minReaderVersion", 2**62), ("protocol", "*", 7),
    ("protocol", "readerFeatures", "x"), ("protocol", "minWriterVersion", None),
    ("txn", "version", "x"), ("txn", "appId", 7), ("txn", "lastUpdated", "x"), ("txn", "*", "x"),
    ("domainMetadata", "configuration", 7), ("domainMetadata", "removed", "x"),
    ("domainMetadata", "domain", None),
    ("sidecar", "path", 7), ("sidecar", "path", "nope.parquet"), ("sidecar", "*", 7),
    ("checkpointMetadata", "version", "x"),
]  # fmt: skip


def _parquet_mutation(files: LogFiles) -> st.SearchStrategy[Mutation]:
    return st.builds(
        lambda name, edit: Mutation("parquet", name, {"action": edit[0], "leaf": edit[1], "value": edit[2]}),
        st.sampled_from(files.parquet_files),
        st.sampled_from(_PARQUET_EDITS),
    )


def mutations(files: LogFiles) -> st.SearchStrategy[Mutation]:
    """Every kind of mutation that applies to a seed with these files."""
    kinds = [
        _value_mutation(files),
        _action_field_mutation(files),
        _action_field_mutation(files),
        _lines_mutation(files),
        _file_mutation(files),
        _last_checkpoint_mutation(files),
    ]
    if files.parquet_files:
        kinds.append(_parquet_mutation(files))
    return st.one_of(kinds)
