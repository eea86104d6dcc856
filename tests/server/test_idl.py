"""The committed Python bindings are exactly what the Thrift compiler makes of the IDL,
and the IDL keeps Storm's wire-level definitions."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from thrift.Thrift import TType

from drpc.errors import DRPCExceptionType
from drpc.protocol.gen import DistributedRPC, DistributedRPCInvocations, ttypes

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "drpc" / "protocol" / "gen"


@pytest.mark.skipif(
    shutil.which("thrift") is None,
    reason="the Thrift compiler is not installed (Debian package thrift-compiler)",
)
def test_make_thrift_regenerates_the_committed_bindings_unchanged(tmp_path: Path) -> None:
    out = tmp_path / "gen"
    subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "thrift", f"THRIFT_OUT={out}"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    regenerated = {path.name: path.read_text() for path in out.iterdir()}
    committed = {path.name: path.read_text() for path in GENERATED.glob("*.py")}
    assert sorted(regenerated) == sorted(committed)
    for name, text in committed.items():
        assert regenerated[name] == text, (
            f"drpc/protocol/gen/{name} differs from the compiler's output"
        )


def test_the_top_level_thrift_folder_is_not_a_package() -> None:
    # A package named "thrift" at the root would shadow the Apache Thrift library.
    assert not (ROOT / "thrift" / "__init__.py").exists()
    assert (ROOT / "thrift" / "drpc.thrift").is_file()


def test_field_ids_and_types_match_storm() -> None:
    def spec(struct: type) -> list[tuple[int, int, str]]:
        return [(f[0], f[1], f[2]) for f in struct.thrift_spec if f is not None]

    assert spec(DistributedRPC.execute_args) == [
        (1, TType.STRING, "functionName"),
        (2, TType.STRING, "funcArgs"),
    ]
    assert spec(DistributedRPC.execute_result) == [
        (0, TType.STRING, "success"),
        (1, TType.STRUCT, "e"),
        (2, TType.STRUCT, "aze"),
    ]
    assert spec(DistributedRPCInvocations.result_args) == [
        (1, TType.STRING, "id"),
        (2, TType.STRING, "result"),
    ]
    assert spec(DistributedRPCInvocations.fetchRequest_args) == [(1, TType.STRING, "functionName")]
    assert spec(DistributedRPCInvocations.failRequest_args) == [(1, TType.STRING, "id")]
    assert spec(DistributedRPCInvocations.failRequestV2_args) == [
        (1, TType.STRING, "id"),
        (2, TType.STRUCT, "e"),
    ]
    for result in (
        DistributedRPCInvocations.result_result,
        DistributedRPCInvocations.failRequest_result,
        DistributedRPCInvocations.failRequestV2_result,
    ):
        assert spec(result) == [(1, TType.STRUCT, "aze")]
    assert spec(DistributedRPCInvocations.fetchRequest_result) == [
        (0, TType.STRUCT, "success"),
        (1, TType.STRUCT, "aze"),
    ]
    assert spec(ttypes.DRPCRequest) == [
        (1, TType.STRING, "func_args"),
        (2, TType.STRING, "request_id"),
    ]
    assert spec(ttypes.DRPCExecutionException) == [(1, TType.STRING, "msg"), (2, TType.I32, "type")]
    assert spec(ttypes.AuthorizationException) == [(1, TType.STRING, "msg")]
    assert {
        kind.name: kind.value for kind in DRPCExceptionType
    } == ttypes.DRPCExceptionType._NAMES_TO_VALUES
