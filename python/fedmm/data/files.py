# SPDX-License-Identifier: BSD-3-Clause
"""Loaders for user files: a MovieLens ``ratings.dat`` and per-client NumPy arrays.

Files are untrusted input: every line or array is validated and a
malformed one raises ``ValueError`` naming the file and the line (or
array), never a silently wrong matrix.
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from fedmm._validation import as_array, check_bool, check_int

__all__ = ["load_movielens_ratings", "load_client_arrays", "as_client_datasets"]


def _parse_ratings(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    users: list[int] = []
    movies: list[int] = []
    ratings: list[float] = []
    with open(path, "rb") as handle:
        for lineno, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("ascii").strip()
            except UnicodeDecodeError:
                raise ValueError(f"{path}:{lineno}: malformed rating line (non-ASCII bytes)") from None
            if not line:
                continue
            fields = line.split("::")
            if len(fields) != 4:
                raise ValueError(
                    f"{path}:{lineno}: malformed rating line {line[:80]!r}: expected "
                    f"'UserID::MovieID::Rating::Timestamp' (4 fields), got {len(fields)}"
                )
            try:
                user, movie, timestamp = int(fields[0]), int(fields[1]), int(fields[3])
                rating = float(fields[2])
            except ValueError:
                raise ValueError(
                    f"{path}:{lineno}: malformed rating line {line[:80]!r}: UserID, MovieID and "
                    "Timestamp must be integers and Rating a number"
                ) from None
            if user < 1 or movie < 1 or timestamp < 0:
                raise ValueError(
                    f"{path}:{lineno}: malformed rating line {line[:80]!r}: expected positive "
                    "UserID and MovieID and a non-negative Timestamp"
                )
            if not (math.isfinite(rating) and 0.0 < rating <= 5.0):
                raise ValueError(
                    f"{path}:{lineno}: malformed rating line {line[:80]!r}: expected a Rating in "
                    f"(0, 5], got {fields[2]!r}"
                )
            users.append(user)
            movies.append(movie)
            ratings.append(rating)
    if not users:
        raise ValueError(f"{path}: no ratings found (empty file)")
    return np.asarray(users, np.int64), np.asarray(movies, np.int64), np.asarray(ratings)


def _most_frequent(ids: np.ndarray, count: int, what: str, path: Path) -> np.ndarray:
    """The ``count`` most frequent ids (ties broken by the smaller id), sorted by id."""
    unique, freq = np.unique(ids, return_counts=True)
    if count > unique.size:
        raise ValueError(f"{path}: asked for {count} {what} but the file has {unique.size}")
    order = np.lexsort((unique, -freq))  # last key is primary: most frequent first
    return np.sort(unique[order[:count]])


def load_movielens_ratings(
    path,
    n_users: int = 5000,
    n_movies: int = 500,
    *,
    return_ids: bool = False,
):
    """Users × movies rating matrix of the most active users and movies (FedMM §6).

    Reads a MovieLens ``ratings.dat`` (one ``UserID::MovieID::Rating::Timestamp``
    per line, as in MovieLens 1M), keeps the ``n_movies`` most rated movies,
    then the ``n_users`` users with the most ratings among those movies
    (ties broken by the smaller id), and returns their ratings with 0 for
    "not rated".  The paper uses 5000 users × 500 movies of MovieLens 1M.

    Parameters
    ----------
    path : str or path-like
        The ``ratings.dat`` file.
    n_users, n_movies : int
        Size of the returned matrix.
    return_ids : bool
        Also return the user and movie ids of the rows and columns.

    Returns
    -------
    ratings : ndarray of shape (n_users, n_movies), float64
        One user per row (one sample per row), rating in (0, 5] or 0.
    user_ids, movie_ids : ndarray of int64
        Only when ``return_ids`` is true; both sorted increasingly.

    Raises
    ------
    ValueError
        On a malformed line (message ``"<path>:<line>: ..."``), a repeated
        (user, movie) pair, or more users/movies asked than present.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"Expected 'path' to be a str or path-like file name, got {type(path).__name__}")
    path = Path(os.fspath(path))
    n_users = check_int(n_users, "n_users", low=1)
    n_movies = check_int(n_movies, "n_movies", low=1)
    return_ids = check_bool(return_ids, "return_ids")
    if path.is_dir():
        raise ValueError(f"{path}: expected a ratings.dat file, got a directory")
    users, movies, values = _parse_ratings(path)
    movie_ids = _most_frequent(movies, n_movies, "movies", path)
    keep = np.isin(movies, movie_ids)
    user_ids = _most_frequent(users[keep], n_users, "users (with a rating of a kept movie)", path)
    keep &= np.isin(users, user_ids)
    rows = np.searchsorted(user_ids, users[keep])
    cols = np.searchsorted(movie_ids, movies[keep])
    flat = rows * n_movies + cols
    unique_flat, first, counts = np.unique(flat, return_index=True, return_counts=True)
    if (counts > 1).any():
        dup = unique_flat[counts > 1][0]
        line_index = np.flatnonzero(keep)[np.flatnonzero(flat == dup)[1]]
        raise ValueError(
            f"{path}: user {user_ids[dup // n_movies]} rated movie {movie_ids[dup % n_movies]} "
            f"more than once (rating #{line_index + 1} of the file repeats an earlier one)"
        )
    matrix = np.zeros((n_users, n_movies))
    matrix[rows, cols] = values[keep]
    return (matrix, user_ids, movie_ids) if return_ids else matrix


def _check_client_array(data, label: str, width: int | None) -> np.ndarray:
    arr = as_array(data, label, ndim=2, order="C")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"Expected '{label}' to have at least one row and column, got shape {arr.shape}")
    if width is not None and arr.shape[1] != width:
        raise ValueError(
            f"Expected every client array to have p={width} columns (as the first one), "
            f"got '{label}' of shape {arr.shape}"
        )
    return arr


def as_client_datasets(datas: Sequence, name: str = "datas") -> list[np.ndarray]:
    """Validate per-client arrays: 2-D, finite, non-empty, the same number of columns.

    Parameters
    ----------
    datas : sequence of array_like of shape (N_i, p)
        One array per client, one sample per row.
    name : str
        Argument name used in error messages.

    Returns
    -------
    list of ndarray of shape (N_i, p), float64, C-ordered
    """
    if isinstance(datas, np.ndarray) or not isinstance(datas, Sequence) or len(datas) == 0:
        raise TypeError(
            f"Expected '{name}' to be a non-empty list of (N_i, p) arrays, got {type(datas).__name__}"
        )
    out: list[np.ndarray] = []
    for i, data in enumerate(datas):
        out.append(_check_client_array(data, f"{name}[{i}]", out[0].shape[1] if out else None))
    return out


def _natural_key(label: str) -> list:
    return [int(tok) if tok.isdigit() else tok for tok in re.split(r"(\d+)", label)]


def load_client_arrays(source) -> list[np.ndarray]:
    """Load one data array per client from ``.npy``/``.npz`` files.

    Parameters
    ----------
    source : str, path-like or sequence of them
        A directory (every ``*.npy`` file in it, in natural name order), one
        ``.npz`` archive (its arrays in natural name order: ``arr_0, arr_1,
        ...`` from :func:`numpy.savez`, or ``client_1, client_2, ...``), a
        single ``.npy`` file (one client), or a list of ``.npy`` files (in the
        given order).  Pickled objects are refused.

    Returns
    -------
    list of ndarray of shape (N_i, p), float64, C-ordered
        Validated as in :func:`as_client_datasets`.

    Raises
    ------
    ValueError
        A file that is not a valid NumPy array file, or an array that is not
        2-D, finite, non-empty, or whose width differs from the first one; the
        message names the file (and the array inside an archive).
    """
    if isinstance(source, (str, os.PathLike)):
        path = Path(os.fspath(source))
        if path.is_dir():
            files = sorted(path.glob("*.npy"), key=lambda f: _natural_key(f.name))
            if not files:
                raise ValueError(f"{path}: directory holds no '*.npy' file")
        elif path.suffix == ".npz":
            try:
                with np.load(path, allow_pickle=False) as archive:
                    keys = sorted(archive.files, key=_natural_key)
                    arrays = [(f"{path}[{key}]", archive[key]) for key in keys]
            except (ValueError, OSError, EOFError) as exc:
                raise ValueError(f"{path}: not a valid .npz archive of numeric arrays ({exc})") from None
            if not arrays:
                raise ValueError(f"{path}: archive holds no array")
            out: list[np.ndarray] = []
            for label, arr in arrays:
                out.append(_check_client_array(arr, label, out[0].shape[1] if out else None))
            return out
        else:
            files = [path]
    else:
        if isinstance(source, bytes) or not isinstance(source, Sequence) or not all(
                isinstance(f, (str, os.PathLike)) for f in source):
            raise TypeError("Expected 'source' to be a path (a directory, a .npz archive or a .npy file) or a "
                            f"sequence of .npy paths, got {type(source).__name__}")
        files = [Path(os.fspath(f)) for f in source]
        if not files:
            raise ValueError("Expected 'source' to name at least one .npy file")
    out = []
    for f in files:
        try:
            arr = np.load(f, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise ValueError(f"{f}: not a valid .npy array file ({exc})") from None
        if not isinstance(arr, np.ndarray):
            raise ValueError(f"{f}: expected a single .npy array, got an .npz archive")
        out.append(_check_client_array(arr, str(f), out[0].shape[1] if out else None))
    return out
