# SPDX-License-Identifier: BSD-3-Clause
"""Machinery shared by the paper-figure experiments and ``fedmm demo``.

One command-line option set for every command (:func:`add_common_options`:
``--seeds``, ``--first-seed``, ``--rounds``, ``--jobs``, ``--out``,
``--config``, ``--progress/--no-progress``, ``--quiet``), argparse ``type=``
validators whose errors name the option as typed (:func:`positive_int`, ...;
every list option is one word of comma-separated values, :func:`comma_list`;
``--out`` is checked by :func:`output_dir` before anything runs),
unknown options reported by the command's own parser (:class:`CommandParser`),
deprecated spellings kept as hidden aliases (:func:`add_deprecated_alias`),
TOML config files applied as if their entries were typed before the
command-line options (:func:`apply_config`), running independent tasks (one
seed of one algorithm) serially or in worker processes behind one progress
bar counted in rounds, mean ± one standard deviation over seeds, band plots,
β/step tuning on a grid with an edge warning (:func:`tune_on_grid`) and the
summary table written as text and JSON (:func:`write_summary`).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import queue
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from fedmm._progress import progress_bar
from fedmm.history import seed_bands  # re-exported: the experiments' band plots use it

__all__ = [
    "CommandParser",
    "ExperimentError",
    "add_common_options",
    "add_deprecated_alias",
    "apply_config",
    "existing_file",
    "nonneg_float",
    "nonneg_int",
    "positive_float",
    "positive_int",
    "positive_float_list",
    "positive_int_list",
    "require_ot_extra",
    "nonneg_float_list",
    "comma_list",
    "choice",
    "output_dir",
    "probability",
    "resolve_progress",
    "seed_list",
    "make_log",
    "tune_on_grid",
    "write_summary",
    "read_toml",
    "run_tasks",
    "seed_bands",
    "plot_band",
    "LINE_STYLES",
    "tidy_log_axis",
    "format_table",
]


class ExperimentError(ValueError):
    """A bad experiment option or config entry (reported without a traceback by the CLI).

    Parameters
    ----------
    message : str
        What is wrong, in the user's terms.
    option : str, optional
        The command-line option concerned (``"--rounds"``); the CLI prints
        ``argument --rounds: <message>``.
    """

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


def require_ot_extra(command: str) -> None:
    """:class:`ExperimentError` unless the ``ot`` extra (JAX and optax) imports: ``command`` is what the user typed
    (``"fedmm experiment ot"``)."""
    try:
        import jax  # noqa: F401
        import optax  # noqa: F401
    except ImportError as exc:
        raise ExperimentError(f"{command} needs the 'ot' extra (pip install 'fedmm[ot]'): {exc}") from None


# --------------------------------------------------------------------------- argparse value types
def _number(text: str, kind: type, what: str, ok: Callable[[Any], bool]) -> Any:
    try:
        value = kind(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """argparse ``type=``: an integer ≥ 1."""
    return _number(text, int, "an integer >= 1", lambda v: v >= 1)


def nonneg_int(text: str) -> int:
    """argparse ``type=``: an integer ≥ 0."""
    return _number(text, int, "an integer >= 0", lambda v: v >= 0)


def positive_float(text: str) -> float:
    """argparse ``type=``: a finite real number > 0."""
    return _number(text, float, "a finite number > 0", lambda v: np.isfinite(v) and v > 0)


def nonneg_float(text: str) -> float:
    """argparse ``type=``: a finite real number ≥ 0."""
    return _number(text, float, "a finite number >= 0", lambda v: np.isfinite(v) and v >= 0)


def probability(text: str) -> float:
    """argparse ``type=``: a probability in (0, 1]."""
    return _number(text, float, "a probability in (0, 1]", lambda v: 0 < v <= 1)


def comma_list(item: Callable[[str], Any], what: str, example: str, *,
               name: str | None = None) -> Callable[[str], tuple]:
    """argparse ``type=`` of a list option: one word of comma-separated values (``"0.05,0.1"``).

    The one list syntax of every ``fedmm`` command: values separated by
    commas in one word, a single value allowed, no empty item; each value
    is checked by ``item``.  A TOML ``--config`` list (``beta_grid = [0.05,
    0.1]``) is joined with commas by :func:`apply_config`, which knows these
    types by their ``comma_list`` attribute.

    Parameters
    ----------
    item : callable(str) -> value
        argparse ``type=`` of one value (raises ``argparse.ArgumentTypeError``).
    what : str
        The values in words, for the error (``"numbers > 0"``).
    example : str
        A valid list, for the error (``"0.05,0.1"``).
    name : str, optional
        ``__name__`` of the returned function.

    Returns
    -------
    callable(str) -> tuple
        The values, in order.

    Examples
    --------
    >>> positive_float_list("0.05,0.1")
    (0.05, 0.1)
    >>> positive_int_list("16")
    (16,)
    >>> positive_int_list("16,,32")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected integers >= 1 separated by commas (e.g. 16,32), got '16,,32'
    """

    def parse(text: str) -> tuple:
        syntax = f"expected {what} separated by commas (e.g. {example})"
        parts = text.split(",")
        if not text.strip() or any(not part.strip() for part in parts):
            raise argparse.ArgumentTypeError(f"{syntax}, got {text!r}")
        values = []
        for part in parts:
            try:
                values.append(item(part.strip()))
            except argparse.ArgumentTypeError as exc:
                raise argparse.ArgumentTypeError(f"{syntax}, got {text!r} ({exc})") from None
        return tuple(values)

    parse.comma_list = True  # type: ignore[attr-defined]
    parse.__name__ = name or "comma_list"
    parse.__doc__ = f"argparse ``type=``: {what} separated by commas (``{example}``)."
    return parse


def choice(choices: Sequence[str]) -> Callable[[str], str]:
    """argparse ``type=`` of one value among ``choices`` (for a :func:`comma_list` of choices)."""

    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(map(repr, choices))})")
        return text

    return parse


positive_int_list = comma_list(positive_int, "integers >= 1", "16,32", name="positive_int_list")
positive_float_list = comma_list(positive_float, "numbers > 0", "0.05,0.1", name="positive_float_list")
nonneg_float_list = comma_list(nonneg_float, "numbers >= 0", "0,0.2", name="nonneg_float_list")


def existing_file(text: str) -> str:
    """argparse ``type=``: the path of an existing file."""
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"expected an existing file, got {text!r}")
    return text


def output_dir(text: str) -> str:
    """argparse ``type=`` of ``--out``: a directory that exists or can be created, and written into.

    Checked before anything runs: an existing file, a path below a file,
    and a directory this user may not write into are refused.
    """
    if not text:
        raise argparse.ArgumentTypeError("expected a directory (created if absent), got ''")
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"expected a directory (created if absent), got the existing file {text!r}")
    existing = path.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"expected a directory (created if absent), got {text!r}, "
                                         f"below the file {str(existing)!r}")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "the directory" if existing == path.absolute() else f"{str(existing)!r}, where it would be created,"
        raise argparse.ArgumentTypeError(f"expected a directory this user can write into, got {text!r}: "
                                         f"{what} is not writable")
    return text


# --------------------------------------------------------------------------- one option set
class CommandParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that remembers its options by destination.

    :attr:`options` maps each ``dest`` to the first ``argparse.Action``
    registered for it (deprecated aliases excluded); :func:`apply_config`
    uses it to turn TOML entries into the options a user would type.
    ``fedmm``'s parser is of this class, and so are its sub-command parsers
    (``add_subparsers`` builds sub-parsers of the parent's class).

    :meth:`parse_args` reports unrecognized arguments from the parser of
    the command that got them (``fedmm demo: error: unrecognized arguments:
    --roundz 5``, with that command's usage), not from ``fedmm``'s: each
    command names itself with ``set_defaults(command_parser=parser)``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.options: dict[str, argparse.Action] = {}
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        if action.option_strings and action.dest != "help" and not isinstance(action, _DeprecatedAlias):
            self.options.setdefault(action.dest, action)
        return action

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> argparse.Namespace:
        """``ArgumentParser.parse_args``, with unrecognized arguments reported by the command's own parser."""
        argv = list(sys.argv[1:] if args is None else args)
        parsed, extras = self.parse_known_args(argv, namespace)
        if extras:
            command = getattr(parsed, "command_parser", None)
            command = command if isinstance(command, CommandParser) else self
            command.error(command.unrecognized(extras, argv))
        return parsed

    def unrecognized(self, extras: Sequence[str], argv: Sequence[str]) -> str:
        """The error for arguments this command does not know, with a hint where one is likely.

        A word after a list option's value is a list typed with spaces
        (``--beta-grid 0.05 0.1``: the lists are one comma-separated word);
        an unknown option close to a known one is named (``--roundz``:
        ``--rounds``).
        """
        import difflib

        message = f"unrecognized arguments: {' '.join(extras)}"
        flags = [f for action in self.options.values() for f in action.option_strings if f.startswith("--")]
        hints = []
        for extra in extras:
            if extra.startswith("--"):
                close = difflib.get_close_matches(extra.split("=", 1)[0], flags, n=1)
                if close:
                    hints.append(f"did you mean {close[0]}?")
        for action in self.options.values():
            if not getattr(action.type, "comma_list", False):
                continue
            for i, word in enumerate(argv[:-2]):
                if word in action.option_strings and argv[i + 2] in extras and not argv[i + 2].startswith("-"):
                    hints.append(f"{word} takes one comma-separated word, e.g. {word} {argv[i + 1]},{argv[i + 2]}")
        return message + (f" ({'; '.join(hints)})" if hints else "")


class _DeprecatedAlias(argparse.Action):
    """Store like the option it replaces, after a note on stderr."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, replacement: str,
                 convert: Callable[[Any], Any] | None = None, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.replacement = replacement
        self.convert = convert

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        print(f"{parser.prog}: warning: {option_string} is deprecated; use {self.replacement}", file=sys.stderr)
        if self.convert is not None:
            try:
                values = self.convert(values)
            except argparse.ArgumentTypeError as exc:
                parser.error(f"argument {option_string}: {exc}")
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def add_deprecated_alias(parser: argparse.ArgumentParser, flag: str, *, dest: str, replacement: str,
                         convert: Callable[[Any], Any] | None = None, **kwargs: Any) -> None:
    """Accept an old option spelling, hidden from ``--help``, with a deprecation note.

    Parameters
    ----------
    parser : argparse.ArgumentParser
    flag : str
        The old spelling (``"--epochs"``).
    dest : str
        Destination of the option it stands for.
    replacement : str
        The new spelling, printed in the note (``"--rounds"``).
    convert : callable, optional
        Maps the old option's value to the new one's.
    **kwargs
        ``type``, ``nargs``, ``const`` ... as for ``add_argument``.
    """
    parser.add_argument(flag, dest=dest, action=_DeprecatedAlias, replacement=replacement, convert=convert,
                        default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)


def add_common_options(parser: argparse.ArgumentParser, *, name: str, seeds: int = 1, rounds: int | None = None,
                       rounds_help: str = "communication rounds per run", jobs: bool = True) -> None:
    """Add the options every ``fedmm`` command shares.

    ``--seeds N`` (runs ``--first-seed`` … ``--first-seed + N − 1``),
    ``--first-seed S``, ``--rounds N``, ``--jobs N`` (worker processes),
    ``--out DIR`` (default ``results/<name>``), ``--config FILE`` (TOML whose
    keys are option destinations, e.g. ``rounds = 300``, ``out = "x"``;
    command-line options override it), ``--progress/--no-progress``
    (default: on when stderr is a terminal) and ``--quiet`` (no progress and
    no printed output; files are still written).

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The command's parser (a :class:`CommandParser` for ``--config``).
    name : str
        Command name, used for the default output directory.
    seeds, rounds : int
        Defaults of ``--seeds`` and ``--rounds`` (``rounds=None``: the
        command has its own default, described by ``rounds_help``).
    rounds_help : str
        What one round is for this command.
    jobs : bool
        Add ``--jobs``.
    """
    group = parser.add_argument_group("common options (every fedmm command)")
    options = getattr(parser, "options", None)

    def add(*flags: str, **kwargs: Any) -> None:
        action = group.add_argument(*flags, **kwargs)
        if options is not None:  # a CommandParser: actions added to a group are registered here
            options.setdefault(action.dest, action)

    add("--seeds", type=positive_int, default=seeds, metavar="N",
                       help="independent runs per curve, seeds FIRST .. FIRST+N-1 (default: %(default)s)")
    add("--first-seed", type=nonneg_int, default=0, metavar="FIRST",
                       help="seed of the first run (default: %(default)s)")
    add("--rounds", type=positive_int, default=rounds, metavar="N",
                       help=rounds_help + (" (default: %(default)s)" if rounds is not None else ""))
    if jobs:
        add("--jobs", type=positive_int, default=1, metavar="N",
            help="worker processes running the command's independent tasks (seeds, arms, dimensions) in "
            "parallel (default: %(default)s)")
    add("--out", metavar="DIR", type=output_dir, default=os.path.join("results", name),
        help="output directory for the JSON runs, PNG figures and summary, created if absent; an existing "
        "file or a directory you cannot write into is refused (default: %(default)s)")
    add("--config", metavar="FILE", type=existing_file, default=None,
                       help="TOML file of option values (keys: option names with '_', e.g. rounds = 300); "
                       "options on the command line override it (default: none)")
    add("--progress", action=argparse.BooleanOptionalAction, default=None,
                       help="progress bars on stderr (default: on when stderr is a terminal)")
    add("--quiet", action="store_true", default=False,
                       help="print nothing but errors; no progress bars (default: %(default)s)")
    parser.set_defaults(command_parser=parser)


def resolve_progress(args: argparse.Namespace) -> bool:
    """Whether to draw progress bars: ``--progress``/``--no-progress``, else stderr is a terminal."""
    if getattr(args, "quiet", False):
        return False
    progress = getattr(args, "progress", None)
    if progress is None:
        return bool(sys.stderr.isatty())
    return bool(progress)


def make_log(args: argparse.Namespace) -> Callable[[str], None]:
    """``print`` to stdout, or a no-op under ``--quiet``."""
    if getattr(args, "quiet", False):
        return lambda text: None
    return print


def seed_list(args: argparse.Namespace) -> list[int]:
    """The seeds of the reported runs, ``first_seed`` to ``first_seed + seeds - 1`` included."""
    return list(range(args.first_seed, args.first_seed + args.seeds))


#: ``--config`` keys renamed by the package's one vocabulary: old key → new key.  An old key
#: is read as the new one after a note on stderr, where the command has the new one.
RENAMED_CONFIG_KEYS = {"alpha": "control_variate_step", "eta": "ridge", "objective_every": "evaluate_every",
                       "eta_sweep": "ridge_sweep", "step_grid": "local_lr_grid", "batch_fraction": "batch_size",
                       "alpha_convention": "control_variate_convention",
                       "server_steps": "theta_steps", "server_lr": "theta_lr"}


def _config_tokens(parser: CommandParser, values: dict[str, Any], source: str) -> list[str]:
    tokens: list[str] = []
    renamed = {}
    for key, value in values.items():
        new = RENAMED_CONFIG_KEYS.get(key)
        if key not in parser.options and new in parser.options and new not in values:
            print(f"{parser.prog}: warning: {source}: key {key} is deprecated; use {new}", file=sys.stderr)
            key = new
        renamed[key] = value
    values = renamed
    unknown = sorted(k for k in values if k not in parser.options)
    if unknown:
        raise ExperimentError(f"{source}: unknown key(s) {unknown}; valid keys are {sorted(parser.options)}")
    for key, value in values.items():
        action = parser.options[key]
        flags = [f for f in action.option_strings if f.startswith("--")]
        flag = flags[0] if flags else action.option_strings[0]
        if isinstance(action, argparse.BooleanOptionalAction):
            if not isinstance(value, bool):
                raise ExperimentError(f"{source}: expected {key} = true or false, got {value!r}")
            tokens.append(flag if value else "--no-" + flag[2:])
        elif action.nargs == 0:
            if not isinstance(value, bool):
                raise ExperimentError(f"{source}: expected {key} = true or false, got {value!r}")
            if value != action.default:
                tokens.append(flag)
        elif isinstance(value, list):
            if not getattr(action.type, "comma_list", False):
                raise ExperimentError(f"{source}: expected one value for {key}, got a list {value!r}")
            if any(isinstance(v, (list, dict)) for v in value):
                raise ExperimentError(f"{source}: expected a flat list for {key}, got {value!r}")
            tokens.append(f"{flag}={','.join(_toml_word(v) for v in value)}")  # '=': a value may start with '-'
        elif isinstance(value, dict):
            raise ExperimentError(f"{source}: expected a value or a list for {key}, got a table")
        else:
            tokens.append(f"{flag}={_toml_word(value)}")
    return tokens


def _toml_word(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def apply_config(args: argparse.Namespace, argv: Sequence[str], *,
                 fixed: dict[str, Any] | None = None) -> argparse.Namespace:
    """Re-parse a command with its ``--config`` TOML entries typed before ``argv``.

    Each TOML key is an option destination (``rounds``, ``out``,
    ``settings`` ...); a value becomes the option a user would type, so it
    is validated by the same ``type=`` checks (a TOML list, for a list
    option only, becomes its comma-separated value: ``beta_grid = [0.05,
    0.1]`` is ``--beta-grid 0.05,0.1``); the command line, parsed after
    it, wins.

    Parameters
    ----------
    args : argparse.Namespace
        The first parse; ``args.command_parser`` is the command's
        :class:`CommandParser` and ``args.config`` the TOML path.
    argv : sequence of str
        The command's own arguments (after its name).
    fixed : dict, optional
        Keys whose TOML value must equal the given value (e.g. ``figure``);
        they are removed before the re-parse.

    Raises
    ------
    ExperimentError
        Unreadable TOML, unknown keys, a fixed key with another value.
    """
    parser = args.command_parser
    values = dict(read_toml(args.config))
    if fixed is None:
        fixed = getattr(args, "config_fixed", None)
    for key, expected in (fixed or {}).items():
        if key in values:
            value = values.pop(key)
            if value != expected:
                raise ExperimentError(f"{args.config}: {key} = {value!r} but the command is {expected!r}")
    values.pop("config", None)
    tokens = _config_tokens(parser, values, str(args.config))
    return parser.parse_args([*tokens, *argv])


def read_toml(path: str | os.PathLike) -> dict[str, Any]:
    """Read a TOML config file into a dict, with errors naming the file.

    Raises
    ------
    ExperimentError
        Missing file or invalid TOML.
    """
    import tomllib

    path = Path(path)
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ExperimentError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"config file {path} is not valid TOML: {exc}") from None


def _worker(fn: Callable, task: Any, ticks: Any) -> Any:
    return fn(task, lambda n=1: ticks.put(n))


def run_tasks(
    fn: Callable[[Any, Callable[[int], None]], Any],
    tasks: Sequence[Any],
    *,
    jobs: int = 1,
    total: int | None = None,
    desc: str = "",
    progress: bool | None = None,
) -> list[Any]:
    """Run ``fn(task, tick)`` for every task; results in task order.

    Parameters
    ----------
    fn : callable(task, tick) -> result
        A module-level function (picklable); it calls ``tick(n)`` after every
        ``n`` units of work (rounds) so the progress bar moves.
    tasks : sequence
        Picklable task descriptions.
    jobs : int
        ``1`` runs in this process; more runs that many worker processes
        (``concurrent.futures.ProcessPoolExecutor``, spawn start method so
        that no thread state of the parent is inherited).
    total : int, optional
        Total number of ticks (the progress bar's length).
    desc : str
        Progress-bar label.
    progress : bool or None
        A tqdm bar on standard error: True on, False off, None (default) on
        only when standard error is a terminal (so log files never get its
        carriage-return updates).
    """
    bar = progress_bar(progress, total=total, desc=desc, unit="round")
    try:
        if jobs <= 1 or len(tasks) <= 1:
            return [fn(task, bar.update) for task in tasks]
        context = multiprocessing.get_context("spawn")
        with context.Manager() as manager:
            ticks = manager.Queue()
            with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
                futures = [pool.submit(_worker, fn, task, ticks) for task in tasks]
                pending = set(futures)
                while pending:
                    done, pending = concurrent.futures.wait(pending, timeout=0.2)
                    while True:
                        try:
                            bar.update(ticks.get_nowait())
                        except queue.Empty:
                            break
                    for future in done:
                        future.result()  # re-raise a worker's exception now, not at the end
                return [f.result() for f in futures]
    finally:
        bar.close()


#: Line styles and markers cycled over the curves of a panel, so that coinciding curves stay visible.
LINE_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1, 1, 1)), "v"))


def plot_band(ax: Any, curves: Sequence[np.ndarray], *, label: str, color: str | None = None,
              log: bool = False, style: int = 0, x: np.ndarray | None = None) -> None:
    """Draw the mean over seeds and a shaded ±1 std band on a matplotlib axis.

    Parameters
    ----------
    ax : matplotlib Axes
    curves : sequence of ndarray of shape (T,)
        One curve per seed (NaN where a round has no value).
    label : str
        Legend entry of the mean line.
    color : str, optional
    log : bool
        Log-scale y axis (the band is clipped at 10⁻³ × mean).
    style : int
        Index into :data:`LINE_STYLES` (line style and marker, about 8 markers per curve).
    x : ndarray of shape (T,), optional
        Abscissae of the rounds (default: the 1-based round numbers).
    """
    rounds, mean, std = seed_bands(curves)
    xs = rounds if x is None else np.asarray(x, dtype=np.float64)[rounds - 1]
    linestyle, marker = LINE_STYLES[style % len(LINE_STYLES)]
    every = max(1, len(xs) // 8)
    line, = ax.plot(xs, mean, label=label, color=color, lw=1.4, linestyle=linestyle, marker=marker,
                    markevery=(min(style * max(1, every // 3), max(0, len(xs) - 1)), every), markersize=4,
                    markerfacecolor="none")
    low, high = mean - std, mean + std
    if log:
        # A band below zero cannot be drawn on a log axis; clip it at a fraction of the mean.
        low = np.maximum(low, mean * 1e-3)
        ax.set_yscale("log")
    if len(curves) > 1:
        ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.2, lw=0)


def tidy_log_axis(ax: Any) -> None:
    """On a log y axis spanning less than two decades, label the ticks as plain numbers (3.5, not 3.5×10⁰)."""
    from matplotlib.ticker import LogLocator, ScalarFormatter

    if ax.get_yscale() != "log":
        return
    low, high = ax.get_ylim()
    if low > 0 and high / low < 100:
        for formatter, setter in ((ScalarFormatter(), ax.yaxis.set_major_formatter),
                                  (ScalarFormatter(), ax.yaxis.set_minor_formatter)):
            formatter.set_scientific(False)
            setter(formatter)
        ax.yaxis.set_minor_locator(LogLocator(subs=(2, 3, 4, 5, 7)))


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A left-aligned plain-text table."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# --------------------------------------------------------------------------- tuning on a grid
def tune_on_grid(evaluate: Callable[[list[float]], list[float]], grid: Sequence[float], *, extend: int = 0,
                 name: str = "beta", option: str = "--beta-grid",
                 warn: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Pick the grid value of least score; warn at the grid's edge, optionally extend past it.

    The grid is sorted; when the best value is its smallest (largest) entry,
    the grid is extended geometrically past that edge, by the ratio of the
    two edge entries (2 for a one-value grid), at most ``extend`` times, and
    the new values are scored.  Ties go to the smaller value.

    Parameters
    ----------
    evaluate : callable(list of float) -> list of float
        Scores of several candidates (lower is better; ``inf`` for a
        diverging run), in the same order.
    grid : sequence of float > 0
        Candidates.
    extend : int
        Maximum number of extensions past an edge (0: none).
    name, option : str
        The tuned quantity and the option holding its grid, for the warning.
    warn : callable(str), optional
        Receives the edge warning (default: no warning is emitted).

    Returns
    -------
    dict
        ``best`` (float), ``scores`` (``{repr(value): score}`` for every
        value tried, ascending), ``grid`` (values tried, ascending),
        ``extended`` (values added past an edge), ``at_edge`` (``"low"``,
        ``"high"`` or None: where the best value sits at the end).
    """
    values = sorted({float(v) for v in grid})
    if not values:
        raise ValueError(f"Expected a non-empty grid for {option}")
    scores = dict(zip(values, (float(s) for s in evaluate(values))))
    extended: list[float] = []
    while True:
        ordered = sorted(scores)
        best = min(ordered, key=lambda v: (scores[v], v))
        edge = None
        if np.isfinite(scores[best]):
            if best == ordered[-1]:
                edge = "high"  # also a one-value grid
            elif best == ordered[0]:
                edge = "low"
        if edge is None or len(extended) >= extend:
            break
        if len(ordered) == 1:
            ratio = 2.0
        elif edge == "low":
            ratio = ordered[1] / ordered[0]
        else:
            ratio = ordered[-1] / ordered[-2]
        new = best / ratio if edge == "low" else best * ratio
        extended.append(new)
        scores[new] = float(evaluate([new])[0])
    ordered = sorted(scores)
    if edge is not None and warn is not None:
        side = "smallest" if edge == "low" else "largest"
        more = (f" after {len(extended)} extension(s)" if extended else "")
        warn(f"the best {name} = {best:g} is the {side} value of its grid {[float(f'{v:g}') for v in ordered]}"
             f"{more}; the optimum may lie outside it: widen {option}"
             + ("" if extend else " or pass --extend-grid N"))
    return {"best": best, "scores": {repr(v): scores[v] for v in ordered}, "grid": ordered,
            "extended": extended, "at_edge": edge}


# --------------------------------------------------------------------------- summary table
def write_summary(out: str | os.PathLike, name: str, headers: Sequence[str], rows: Sequence[Sequence[Any]], *,
                  notes: str = "", extra: dict[str, Any] | None = None) -> tuple[str, list[Path]]:
    """Write the summary table as ``<name>_summary.txt`` and ``<name>_summary.json``.

    The JSON holds ``{"headers": [...], "rows": [{header: cell}], "notes": str, **extra}``.

    Returns
    -------
    text : str
        The table and the notes, as printed.
    paths : list of Path
        The two files.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    text = format_table(headers, rows) + (f"\n{notes}" if notes else "")
    txt = out / f"{name}_summary.txt"
    txt.write_text(text + "\n", encoding="utf-8")
    payload = {"headers": list(headers), "rows": [dict(zip(headers, (_plain(c) for c in row))) for row in rows],
               "notes": notes, **(extra or {})}
    js = out / f"{name}_summary.json"
    with open(js, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=1)
    return text, [txt, js]


def _plain(cell: Any) -> Any:
    if isinstance(cell, (np.floating, np.integer)):
        cell = cell.item()
    if isinstance(cell, float) and not np.isfinite(cell):
        return repr(cell)
    return cell
