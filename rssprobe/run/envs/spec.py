"""An environment's spec: a pinned torch, DeepSpeed (a version or a local source), extras; its name."""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from ...errors import UserError
from ...store import layout

MAX_NAME = 40
# libraries above torch and DeepSpeed that are version axes (env, matrix, bisect): their short names in env names
LIBRARIES = {"transformers": "tf", "accelerate": "acc"}


@dataclass(frozen=True)
class Source:
    """DeepSpeed from a local checkout: its working tree, or one git revision of it."""

    path: Path
    commit: str | None = None  # None: the working tree as it is

    def canonical(self) -> str:
        return f"deepspeed={self.path}" + (f"@{self.commit}" if self.commit else "")

    def short(self) -> str:
        if self.commit:
            return f"ds-{self.commit[:10]}"
        return f"dssrc-{hashlib.sha1(str(self.path).encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class EnvSpec:
    torch: str  # the pinned version
    deepspeed: str | Source  # a version or a local source
    extras: tuple[str, ...] = field(default_factory=tuple)  # further requirements, passed to pip as they are

    @classmethod
    def parse(cls, items: list[str] | tuple[str, ...]) -> EnvSpec:
        """'torch==V' 'deepspeed==V|deepspeed=PATH|deepspeed=PATH@REV' [other requirements]; also one string."""
        words = [w for item in items for w in item.split()]
        torch = deepspeed = None
        extras: list[str] = []
        for word in words:
            if word.startswith("deepspeed=") and not word.startswith("deepspeed=="):
                deepspeed = _source(word.split("=", 1)[1])
                continue
            try:
                req = Requirement(word)
            except InvalidRequirement as e:
                raise UserError(f"env spec {word}: not a requirement ({e})") from None
            name = req.name.lower()
            if name == "torch":
                torch = _pinned(req, word)
            elif name == "deepspeed":
                deepspeed = _pinned(req, word)
            else:
                extras.append(word)
        if torch is None:
            raise UserError(f"env spec {' '.join(words) or '(empty)'}: give torch==VERSION (always pinned: an "
                            "unpinned torch pulls a multi-GB CUDA build)")
        if deepspeed is None:
            raise UserError(f"env spec {' '.join(words)}: give deepspeed==VERSION, deepspeed=PATH or "
                            "deepspeed=PATH@REV")
        return cls(torch, deepspeed, tuple(sorted(extras)))

    def canonical(self) -> list[str]:
        ds = self.deepspeed.canonical() if isinstance(self.deepspeed, Source) else f"deepspeed=={self.deepspeed}"
        return [f"torch=={self.torch}", ds, *self.extras]

    @property
    def name(self) -> str:
        ds = self.deepspeed.short() if isinstance(self.deepspeed, Source) else f"ds{self.deepspeed}"
        pinned = [_pinned_library(e) for e in self.extras]
        libs = "".join(f"-{short}{v}" for short, v in pinned if short) if all(s for s, _v in pinned) else None
        name = layout.slug(f"torch{self.torch}-{ds}{libs or ''}")
        if (self.extras and libs is None) or len(name) > MAX_NAME + 20 * len(pinned):
            return "env-" + hashlib.sha1(" ".join(self.canonical()).encode()).hexdigest()[:12]
        return name


def check_pinned_libraries(words: list[str] | tuple[str, ...]) -> None:
    """An env spec a person typed (env create, --env): a library axis (transformers, accelerate) pinned as torch and
    DeepSpeed are, or a local clone; a range (transformers>=4) would install whatever is newest that day, under a
    name that does not say which."""
    for word in (w for item in words for w in item.split()):
        try:
            req = Requirement(word)
        except InvalidRequirement:
            continue  # EnvSpec.parse names it
        if req.name.lower() in LIBRARIES and not req.url and req.specifier:
            _pinned(req, word)


def _pinned_library(extra: str) -> tuple[str | None, str | None]:
    """('tf', '4.51.3') for 'transformers==4.51.3' (a version axis with a short name); (None, None) otherwise."""
    try:
        req = Requirement(extra)
    except InvalidRequirement:
        return None, None
    spec = list(req.specifier)
    if req.name.lower() in LIBRARIES and not req.url and len(spec) == 1 and spec[0].operator == "==":
        return LIBRARIES[req.name.lower()], spec[0].version
    return None, None


def library_requirement(name: str, value: str) -> str:
    """The requirement that installs one value of a library axis: a release (4.51.3), or a local clone's working
    tree (PATH) or revision (PATH@REV), as a PEP 508 URL without spaces (env specs split on them)."""
    if "/" not in value:
        return f"{name}=={value}"
    path, _, rev = value.partition("@")
    where = Path(path).expanduser().resolve()
    if not where.is_dir():
        raise UserError(f"--{name} {value}: {where} is not a directory (a local clone of {name})")
    return f"{name}@git+file://{where}@{rev}" if rev else f"{name}@file://{where}"


def check_clone(name: str, value: str) -> None:
    """A library axis's local clone as a campaign takes it: a checkout of a Python project (pyproject.toml,
    setup.py or setup.cfg) and, with @REV, a revision its git knows; one line otherwise, before any environment
    (pip would fail on it minutes later, inside the first cell)."""
    library_requirement(name, value)
    path, _, rev = value.partition("@")
    where = Path(path).expanduser().resolve()
    if not any((where / f).is_file() for f in ("pyproject.toml", "setup.py", "setup.cfg")):
        raise UserError(f"--{name} {value}: {where} is not a checkout of {name} (no pyproject.toml or setup.py)")
    if rev:
        out = subprocess.run(["git", "-C", str(where), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                             capture_output=True, text=True)
        if out.returncode != 0 or not out.stdout.strip():
            raise UserError(f"--{name} {value}: {rev} is not a revision of a git checkout at {where}")


def axis_values(flag: str, given: list[str] | tuple[str, ...]) -> list[str]:
    """THE parser of a version axis (--torch, --deepspeed, --transformers, --accelerate; repeatable, each
    comma-separated): every value once, none empty, each a release or a PATH[@REV] (check_versions); a library's
    clone checked where it is (library_requirement). One line, before any environment or run."""
    values: list[str] = []
    for text in given:
        for item in text.split(","):
            value = item.strip()
            if not value or any(c.isspace() for c in value):
                raise UserError(f"{flag} {text!r}: an empty value or a space in one (V1,V2,...)")
            values.append(value)
    check_versions(flag, values)
    name = flag.lstrip("-")
    if name in LIBRARIES:
        for value in values:
            if "/" in value:
                check_clone(name, value)
    return values


def library_extras(transformers: str | None, accelerate: str | None, this_accelerate: str | None) -> tuple[str, ...]:
    """The requirements of an environment's library axes. transformers' DeepSpeed integration (HfDeepSpeedConfig)
    needs accelerate on 4.x: a transformers value without an accelerate axis brings this Python's accelerate
    (`this_accelerate`, else the newest that fits the pinned torch)."""
    out = [library_requirement("transformers", transformers)] if transformers else []
    if accelerate:
        out.append(library_requirement("accelerate", accelerate))
    elif transformers:
        out.append(f"accelerate=={this_accelerate}" if this_accelerate else "accelerate")
    return tuple(out)


def check_versions(flag: str, values: list[str]) -> list[str]:
    """Each value a release (0.19.8) or, for DeepSpeed, a source PATH[@REV] (it has a '/'), each once; UserError,
    one line, before any environment is built or any run starts."""
    seen = set()
    for value in values:
        if "/" not in value:
            try:
                Version(value)
            except InvalidVersion:
                raise UserError(f"{flag} {value}: not a version (e.g. 0.19.8) or a source PATH[@REV]") from None
        if value in seen:
            raise UserError(f"{flag} {','.join(values)}: {value} is given twice")
        seen.add(value)
    return values


def _pinned(req: Requirement, word: str) -> str:
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator not in ("==", "===") or "*" in specs[0].version:
        hint = " (an unpinned torch pulls a multi-GB CUDA build)" if req.name.lower() == "torch" else ""
        example = {"torch": "2.13.0", "deepspeed": "0.19.8", "transformers": "4.51.3"}.get(req.name.lower(), "VERSION")
        raise UserError(f"env spec {word}: pin an exact version, e.g. {req.name}=={example}{hint}")
    return specs[0].version


def _source(value: str) -> Source:
    path_text, rev = value, None
    head, sep, tail = value.rpartition("@")
    if sep and head and "/" not in tail:
        path_text, rev = head, tail
    path = Path(path_text).expanduser().resolve()
    if not path.is_dir():
        raise UserError(f"env spec deepspeed={value}: {path} is not a directory")
    if rev is None:
        return Source(path)
    out = subprocess.run(["git", "-C", str(path), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise UserError(f"env spec deepspeed={value}: {rev} is not a revision of the git checkout {path}")
    return Source(path, out.stdout.strip())
