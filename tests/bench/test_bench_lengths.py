"""Length files for the planner: good files parse, bad ones fail with the file (and line) named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.lengths import load_lengths


def test_jsonl_ints_and_objects(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text('12\n\n{"length": 7, "id": "x"}\n0\n3.0\n')
    assert load_lengths(path) == [12, 7, 0, 3]
    keyed = tmp_path / "b.jsonl"
    keyed.write_text('{"n": 5}\n{"n": 6}\n')
    assert load_lengths(keyed, jsonl_key="n") == [5, 6]


def test_csv_with_and_without_header(tmp_path: Path) -> None:
    plain = tmp_path / "plain.csv"
    plain.write_text("4\n5\n\n6\n")
    assert load_lengths(plain) == [4, 5, 6]
    header = tmp_path / "header.csv"
    header.write_text("id,length\na,10\nb,20\n")
    assert load_lengths(header) == [10, 20]


def test_npy(tmp_path: Path) -> None:
    path = tmp_path / "l.npy"
    np.save(path, np.array([3, 0, 4096], dtype=np.int32))
    assert load_lengths(path) == [3, 0, 4096]
    floats = tmp_path / "f.npy"
    np.save(floats, np.array([3.0, 8.0]))
    assert load_lengths(floats) == [3, 8]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("empty.jsonl", "", "holds no lengths"),
        ("blank.csv", "\n\n", "holds no lengths"),
        ("header_only.csv", "length\n", "holds no lengths"),
        ("word.csv", "length\n5\nabc\n", r":3: expected a non-negative integer length, got 'abc'"),
        ("frac.csv", "5\n2.5\n", r":2: length '2.5' is not an integer"),
        ("cols.csv", "1,2\n3,4\n", r":1: 2 columns but no header"),
        ("nocol.csv", "a,b\n1,2\n", r":1: no 'length' column in header"),
        ("neg.jsonl", "4\n-1\n", r":2: negative length -1"),
        ("broken.jsonl", '4\n{"length": 5\n', r":2: malformed JSON"),
        ("bool.jsonl", "true\n", r":1: expected a non-negative integer length, got True"),
        ("str.jsonl", '"12"\n', r":1: expected a non-negative integer length, got '12'"),
        ("list.jsonl", "[1, 2]\n", r":1: expected a non-negative integer length, got \[1, 2\]"),
        ("nokey.jsonl", '{"len": 5}\n', r":1: object has no 'length' key"),
        ("lengths.txt", "5\n", r"unsupported file extension '.txt'"),
        ("noext", "5\n", r"unsupported file extension '\(none\)'"),
    ],
)
def test_bad_text_files(tmp_path: Path, name: str, content: str, message: str) -> None:
    """Each error is a ValueError naming the file, and the 1-based line where it has one.

    Negative lengths are refused as the spec refuses them (R-ERR-6).
    """
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as info:
        load_lengths(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (np.array([1, -2, 3]), "element 1 is a negative length -2"),
        (np.array([1.5, 2.0]), "element 0 is 1.5, not an integer length"),
        (np.array([[1, 2]]), r"expected a 1-D array of lengths, got shape \(1, 2\)"),
        (np.array(["a"]), "expected an integer array, got dtype <U1"),
        (np.array([], dtype=np.int64), "holds no lengths"),
    ],
)
def test_bad_npy(tmp_path: Path, array: np.ndarray, message: str) -> None:
    path = tmp_path / "bad.npy"
    np.save(path, array)
    with pytest.raises(ValueError, match=message) as info:
        load_lengths(path)
    assert str(path) in str(info.value)


def test_corrupt_npy_and_binary_csv(tmp_path: Path) -> None:
    corrupt = tmp_path / "c.npy"
    corrupt.write_bytes(b"not numpy at all")
    with pytest.raises(ValueError, match="not a readable .npy array"):
        load_lengths(corrupt)
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(ValueError, match="not UTF-8 text"):
        load_lengths(binary)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_lengths(tmp_path / "absent.jsonl")
