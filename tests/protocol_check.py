"""The structural check of a party or compressor against a :mod:`fedmm.protocols` protocol: ``isinstance``
(member names) plus signatures that accept every call the protocol's own signature allows.  Shared by
``tests/quality/test_protocols.py`` and the algorithm tests (pytest's ``pythonpath = ["tests"]``)."""
import inspect
from typing import Protocol

_BASES = {object, Protocol}


# --------------------------------------------------------------------------- the signature check
def protocol_members(proto) -> dict[str, object]:
    """Members a protocol declares (its own and its protocol bases'): name -> function, property or type."""
    members: dict[str, object] = {}
    for klass in reversed(proto.__mro__):
        if klass in _BASES or not getattr(klass, "_is_protocol", False):
            continue
        for name in getattr(klass, "__annotations__", {}):
            members[name] = klass.__annotations__[name]
        for name, value in vars(klass).items():
            if (not name.startswith("_") or name == "__call__") and (inspect.isfunction(value)
                                                                       or isinstance(value, property)):
                members[name] = value
    return members


def _accepts(impl: inspect.Signature, spec: inspect.Signature) -> list[str]:
    """What a call valid for ``spec`` (self removed) may pass that ``impl`` (bound) would not accept."""
    problems = []
    params = list(impl.parameters.values())
    var_pos = any(p.kind is p.VAR_POSITIONAL for p in params)
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    matched = set()
    for k, want in enumerate(spec.parameters.values()):
        if want.kind in (want.VAR_POSITIONAL, want.VAR_KEYWORD):
            continue
        got = impl.parameters.get(want.name)
        if want.kind is want.POSITIONAL_OR_KEYWORD:
            if k < len(positional) and positional[k].name == want.name:
                got = positional[k]
            elif not (var_pos and var_kw):
                problems.append(f"parameter {k} should be {want.name!r} (positional or keyword), got "
                                f"{positional[k].name if k < len(positional) else 'nothing'!r}")
                continue
        elif want.kind is want.KEYWORD_ONLY:
            if got is None or got.kind not in (got.KEYWORD_ONLY, got.POSITIONAL_OR_KEYWORD):
                if not var_kw:
                    problems.append(f"keyword {want.name!r} is not accepted")
                continue
        elif want.kind is want.POSITIONAL_ONLY and k >= len(positional) and not var_pos:
            problems.append(f"positional parameter {k} is not accepted")
            continue
        if got is not None:
            matched.add(got.name)
            if want.default is not want.empty and got.default is got.empty:
                problems.append(f"{want.name!r} may be omitted by callers but has no default")
    for p in params:
        if p.name not in matched and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.default is p.empty:
            problems.append(f"extra parameter {p.name!r} has no default")
    return problems


def signature_problems(obj, proto) -> list[str]:
    """Every way in which ``obj`` does not accept the calls ``proto`` allows (empty: compatible)."""
    problems = []
    for name, spec in protocol_members(proto).items():
        if not hasattr(obj, name):
            problems.append(f"{name}: missing")
            continue
        if not inspect.isfunction(spec):
            continue  # an attribute or property: presence is all a protocol can say
        member = getattr(obj, name)
        if not callable(member):
            problems.append(f"{name}: not callable")
            continue
        want = inspect.signature(spec)
        want = want.replace(parameters=list(want.parameters.values())[1:])  # drop self
        problems += [f"{name}: {p}" for p in _accepts(inspect.signature(member), want)]
    return problems


def assert_satisfies(obj, *protocols):
    for proto in protocols:
        assert isinstance(obj, proto), f"{obj!r} is not a {proto.__name__}"
        problems = signature_problems(obj, proto)
        assert not problems, f"{type(obj).__name__} vs {proto.__name__}: {problems}"
