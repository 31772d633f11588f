"""Chat templates, rendered apart: a template comes from model files, so it is untrusted code.

It runs in Jinja's immutable sandbox (no attribute access to Python internals, no mutation of the objects passed
in), and the sandbox runs in a child process of its own, limited in memory (MEMORY_BYTES of address space) and in
time (TIMEOUT_S a rendering), its output bounded by the conversation's length. A template that would build
gigabytes (`'x' * 3000000000`, a join, a doubling loop) or loop for minutes fails as one error, and the child is
started again for the next conversation. The child is this file run as a script: it imports nothing of verispec,
only jinja2.
"""
from __future__ import annotations

import json
import select
import subprocess
import sys
import threading
import weakref

MEMORY_BYTES = 1 << 30           # the child's address space (its Python and jinja2 take about 30 MB)
TIMEOUT_S = 10.0                 # a rendering (a real template takes milliseconds)
SLACK_CHARS = 4 << 20            # output past 32 characters a character of the messages, plus this, is refused


class TemplateFailed(Exception):
    """The template failed: its error, or a bound it passed. The message is one line."""


def compile_template(source: str):
    """A chat template compiled in Jinja's immutable sandbox, with the settings `transformers` renders chat
    templates with (blocks trimmed; undefined names, such as `tools`, false and empty) and its `raise_exception`."""
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):                # what Hugging Face templates call to reject a conversation
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source)


def render(template, text_chars: int, context: dict) -> str:
    """Render piece by piece, refusing output past 32 * text_chars + SLACK_CHARS (a loop that writes)."""
    pieces, size, cap = [], 0, 32 * text_chars + SLACK_CHARS
    for piece in template.generate(**context):
        size += len(piece)
        if size > cap:
            raise TemplateFailed(f"it rendered more than {cap} characters")
        pieces.append(piece)
    return "".join(pieces)


def _child() -> None:
    """The child: the first line of stdin is {"source", "memory"}; then each line a rendering's {"chars",
    "context"}, answered by one line, {"text"} or {"error"}. Exits at the end of stdin."""
    first = json.loads(sys.stdin.readline())
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (first["memory"], first["memory"]))
    except (ImportError, ValueError, OSError):     # no such limit here (or a lower hard one): time still bounds it
        pass

    def one_line(e: BaseException) -> str:
        if isinstance(e, MemoryError):
            return f"MemoryError: it needs more than {first['memory'] >> 20} MiB"
        return f"{type(e).__name__}: {e}"

    template, failed = None, None
    try:
        template = compile_template(first["source"])       # (constants are folded here: it may run out of memory)
    except BaseException as e:                     # noqa: BLE001 (any error of untrusted code is its answer)
        failed = one_line(e)
    for line in sys.stdin:
        try:
            if failed:
                raise TemplateFailed(failed)
            job = json.loads(line)
            answer = {"text": render(template, job["chars"], job["context"])}
        except TemplateFailed as e:
            answer = {"error": str(e)}
        except BaseException as e:                 # noqa: BLE001 (MemoryError, RecursionError...: one line back)
            answer = {"error": one_line(e)}
        try:
            out = json.dumps(answer)
        except MemoryError:
            out = json.dumps({"error": "MemoryError: its output does not fit the child's memory"})
        sys.stdout.write(out + "\n")
        sys.stdout.flush()


class TemplateProcess:
    """A compiled chat template in its child process, started on first use and again after a failure that ended
    it. Thread-safe: one rendering at a time."""

    def __init__(self, source: str):
        self.source, self.proc, self.lock = source, None, threading.Lock()
        self._finalizer = None

    def render(self, text_chars: int, **context) -> str:
        """The rendered conversation; TemplateFailed with the reason where the template fails or passes a bound.
        text_chars: the messages' length, which bounds the output."""
        line = json.dumps({"chars": text_chars, "context": context}) + "\n"
        with self.lock:
            proc = self._started()
            # written from a thread: a child stuck before reading it all must not block this one past the limit
            threading.Thread(target=_send, args=(proc, line), daemon=True).start()
            try:
                ready, _, _ = select.select([proc.stdout], [], [], TIMEOUT_S)
                answer = proc.stdout.readline() if ready else None
            except OSError:                        # the child is gone (its memory limit, a kill)
                answer = ""
            if not answer:
                self._stop()
                raise TemplateFailed(f"it took more than {TIMEOUT_S:g} s" if answer is None
                                     else "it ended its process (out of memory?)")
        answer = json.loads(answer)
        if "error" in answer:
            raise TemplateFailed(answer["error"])
        return answer["text"]

    def _started(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            self._stop()
            try:
                self.proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                             encoding="utf-8", bufsize=1 << 16)
            except OSError as e:
                raise TemplateFailed(f"cannot start its process: {e}") from None
            self.proc.stdin.write(json.dumps({"source": self.source, "memory": MEMORY_BYTES}) + "\n")
            self.proc.stdin.flush()
            self._finalizer = weakref.finalize(self, _end, self.proc)
        return self.proc

    def _stop(self) -> None:
        if self._finalizer is not None:
            self._finalizer()                      # kills it and reaps it
        self.proc = self._finalizer = None


def _send(proc: subprocess.Popen, line: str) -> None:
    try:
        proc.stdin.write(line)
        proc.stdin.flush()
    except (OSError, ValueError):                  # the child ended (the reader sees it), or was killed
        pass


def _end(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


if __name__ == "__main__":
    _child()
