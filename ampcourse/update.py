"""``./course update`` (``python -m ampcourse update``): bring in a newer course and keep your answers.

Your answers live in ``exercises/``, which the course also updates, so a plain ``git pull`` either
refuses ("your local changes would be overwritten") or leaves merge-conflict markers in a notebook.
This does it safely, as one transaction:

1. copies every changed notebook of ``exercises/`` and ``notebooks/`` to ``exercises/.backup/<time>/``,
   each under its own path (``.backup/<time>/exercises/NN_x.ipynb``, ``.backup/<time>/notebooks/NN_x.ipynb``),
   and leaves a marker there (:data:`MARKER`) saying that an update is in progress;
2. keeps the bytes of those notebooks in memory, puts the course's files back (``git checkout``) and
   runs ``git pull --ff-only``;
3. puts your answers into the new exercises task by task (:func:`ampcourse.authoring.build`, in a fresh
   Python process, so the new course map is the one used) and lists every task whose text or check
   changed, so you can re-read it; then removes the marker.

If the pull is refused or fails, or the update is interrupted (Ctrl-C, SIGTERM, SIGHUP: caught, every
file written back, with those signals ignored while it writes), every notebook is put back byte for byte
and the message says so. Interrupted or failed *after* the pull, the marker stays (it names the commit the
update started from): the next ``./course update`` merges your answers against that commit's templates.
If the process is killed outright (``kill -9``, a power cut), the marker stays too: the next ``./course
update`` (or ``./course update --restore``) first puts the backed-up files back, after backing up any
notebook you changed in the meantime (it is named in the report). While a marker is left, ``grade`` and
``./course lab`` warn and ``build`` refuses. Lessons you ran and saved are replaced by the new version after
a successful update (rerun them; your copies are in the backup).

``./course update --restore`` (``python -m ampcourse update --restore``) copies the newest backup back
into ``exercises/`` and ``notebooks/`` (what it overwrites is backed up first).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from . import authoring
from .course import ROOT

MARKER = "UPDATE-IN-PROGRESS.json"  # in the update's backup folder while it runs


class UpdateError(RuntimeError):
    """The update could not be done; the message says why and what to do."""


class Interrupted(BaseException):
    """SIGTERM or SIGHUP arrived during the update (SIGINT is Python's KeyboardInterrupt)."""


def _git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        run = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    except FileNotFoundError:
        raise UpdateError("git is not installed (or not on PATH): install git, then run ./course update "
                          "again. Nothing was changed.") from None
    if check and run.returncode != 0:
        raise UpdateError(f"`git {' '.join(args)}` failed: {(run.stderr or run.stdout).strip()}")
    return run


def _changed(root: Path) -> list[Path]:
    """The tracked notebooks of exercises/ and notebooks/ that differ from the last commit (deleted ones left
    out: there is nothing to save, and the build after the pull makes them again)."""
    status = _git(root, "status", "--porcelain", "--", "exercises", "notebooks").stdout
    paths = []
    for line in status.splitlines():
        name = line[3:].split(" -> ")[-1].strip('"')
        if name.endswith(".ipynb") and line[:2] != "??" and "D" not in line[:2] and (root / name).is_file():
            paths.append(root / name)
    return paths


def _backups(root: Path) -> list[Path]:
    folder = root / "exercises" / ".backup"
    return sorted((p for p in folder.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime) \
        if folder.is_dir() else []


def _files_in(backup: Path) -> dict[Path, Path]:
    """``{backup file: where it belongs (relative path)}`` for a backup folder with exercises/ and notebooks/."""
    return {path: path.relative_to(backup) for top in ("exercises", "notebooks")
            for path in sorted((backup / top).rglob("*.ipynb"))}


def _put_back(backup: Path, root: Path) -> list[str]:
    """Copy every notebook of ``backup`` to its place in ``root``; return their relative paths."""
    done = []
    for source, rel in _files_in(backup).items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.restore")
        shutil.copy2(source, tmp)
        os.replace(tmp, target)
        done.append(rel.as_posix())
    return done


def prune_backups(root: Path = ROOT) -> list[str]:
    """Keep ``exercises/.backup/`` from growing by a copy of every unchanged notebook on each update: a backed-up
    file that a *newer* backup holds byte for byte, under the same path, is removed (the newest copy stays, so no
    version of a notebook is lost), and a folder left empty goes too. An interrupted update's folder (its
    :data:`MARKER`) is left whole: the next update puts all of it back. The other folders keep their times, so
    "newest" (``--restore``) does not change. Returns a report line, or none when nothing was removed."""
    folders = _backups(root)
    removed = 0
    for i, folder in enumerate(folders[:-1]):
        if (folder / MARKER).exists():
            continue
        newer = folders[i + 1:]
        stat = folder.stat()
        for path in sorted(folder.rglob("*.ipynb")):
            rel = path.relative_to(folder)
            size = path.stat().st_size
            twins = (other / rel for other in newer)
            if any(t.is_file() and t.stat().st_size == size and t.read_bytes() == path.read_bytes() for t in twins):
                path.unlink()
                removed += 1
        if not any(p.is_file() for p in folder.rglob("*")):
            shutil.rmtree(folder)
        else:
            for sub in sorted((p for p in folder.rglob("*") if p.is_dir()), reverse=True):
                if not any(sub.iterdir()):
                    sub.rmdir()
            os.utime(folder, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    if not removed:
        return []
    return [f"removed {removed} backed-up cop{'y' if removed == 1 else 'ies'} that a newer backup holds byte for byte "
            "(exercises/.backup/ keeps every version of a notebook once)"]


def _interrupted_update(root: Path) -> Path | None:
    return next((b for b in reversed(_backups(root)) if (b / MARKER).exists()), None)


_RECOVERED_HEAD: dict[Path, str] = {}  # the commit an interrupted update started from (its exercises' templates)

INTERRUPTED = "an update was interrupted: run ./course update to restore your notebooks"


def interrupted_warning(root: Path = ROOT) -> str | None:
    """What ``grade``, ``build`` and ``./course lab`` say while an interrupted update's marker is left."""
    backup = _interrupted_update(root)
    if backup is None:
        return None
    return f"{INTERRUPTED} (they are in {backup.relative_to(root)}/)"


def _blob(root: Path, commit: str, rel: Path) -> bytes | None:
    """The bytes of ``rel`` at ``commit``, or None."""
    try:
        run = subprocess.run(["git", "show", f"{commit}:{rel.as_posix()}"], cwd=root, capture_output=True)
    except FileNotFoundError:
        return None
    return run.stdout if run.returncode == 0 else None


@contextmanager
def _handled(names: tuple[str, ...], handler):
    """Inside, the signals ``names`` (those this platform has) go to ``handler``; the previous handlers come back
    after."""
    old = {}
    for name in names:
        sig = getattr(signal, name, None)
        if sig is not None:
            try:
                old[sig] = signal.signal(sig, handler)
            except ValueError:  # not the main thread
                pass
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


@contextmanager
def _uninterruptible():
    """Ctrl-C, SIGTERM and SIGHUP wait while notebooks are written back (a second Ctrl-C must not leave some
    of them blank); they are ignored inside, and the previous handlers come back after."""
    with _handled(("SIGINT", "SIGTERM", "SIGHUP"), signal.SIG_IGN):
        yield


def recover(root: Path = ROOT) -> list[str]:
    """If an earlier update was killed before it finished, put its backed-up notebooks back; report lines.

    A notebook the learner changed after that (it differs from the backup and from the course's version at
    the commit the update started from and at HEAD: work done in the blank exercise) is backed up first, into
    a folder of its own, and named in the report: putting the backup back never loses it."""
    backup = _interrupted_update(root)
    if backup is None:
        return []
    try:
        head = json.loads((backup / MARKER).read_text(encoding="utf-8"))["head"]
    except (ValueError, KeyError, TypeError, OSError):
        head = None
    commits = [c for c in (head, "HEAD") if c]
    newer = []
    for source, rel in _files_in(backup).items():
        target = root / rel
        if not target.is_file():
            continue
        data = target.read_bytes()
        if data != source.read_bytes() and all(_blob(root, commit, rel) != data for commit in commits):
            newer.append(target)
    kept = authoring.backup(newer, root)
    with _uninterruptible():
        done = _put_back(backup, root)
    if head is not None:
        _RECOVERED_HEAD[root] = head
    (backup / MARKER).unlink()
    where = backup.relative_to(root)
    lines = [f"an earlier update was stopped before it finished: put back your {len(done)} notebook(s) from "
             f"{where}/ ({', '.join(done) or 'none'})"]
    if kept is not None:
        rels = ", ".join(p.relative_to(root).as_posix() for p in newer)
        lines.append(f"you had changed {rels} since that update stopped: that newer copy is kept in "
                     f"{kept.relative_to(root)}/ (open it and copy your new work back into the notebook)")
    return lines


def restore(root: Path = ROOT) -> list[str]:
    """``update --restore``: copy the newest backup back (after backing up what it overwrites)."""
    backups = [b for b in _backups(root) if _files_in(b)]
    if not backups:
        flat = [b for b in _backups(root) if any(b.glob("*.ipynb"))]
        if flat:
            raise UpdateError(f"{flat[-1].relative_to(root)}/ was made by an older course version, which kept one "
                              "file per name (an exercise and its lesson share one): copy the file you want back "
                              "by hand")
        raise UpdateError("there is no backup in exercises/.backup/ to restore")
    newest = backups[-1]
    rels = list(_files_in(newest).values())
    current = [root / rel for rel in rels if (root / rel).is_file()]
    before = authoring.backup(current, root)
    with _uninterruptible():
        done = _put_back(newest, root)
    if (newest / MARKER).exists():  # an interrupted update's backup: restored, so no longer pending
        (newest / MARKER).unlink()
    lines = [f"restored {rel} from {newest.relative_to(root)}/" for rel in done]
    if before is not None:
        lines.append(f"what was there before is backed up in {before.relative_to(root)}/ "
                     "(`./course update --restore` again brings it back)")
    return lines


@contextmanager
def _signals_interrupt():
    """SIGTERM and SIGHUP raise :class:`Interrupted` (so the update's clean-up runs) while inside."""
    def handler(signum, frame):
        raise Interrupted(signal.Signals(signum).name)
    with _handled(("SIGTERM", "SIGHUP"), handler):
        yield


def update(root: Path = ROOT, remote: str | None = None, restore_backup: bool = False) -> int:
    """Run the update (or ``--restore``); print what happened; return 0 on success, 1 on failure, 130 when
    interrupted."""
    try:
        with _signals_interrupt():
            lines = restore(root) if restore_backup else run_update(root, remote)
    except UpdateError as err:
        print(f"[update] {err}")
        return 1
    except (KeyboardInterrupt, Interrupted) as err:
        what = str(err) if isinstance(err, Interrupted) else "Ctrl-C"
        print(f"[update] interrupted ({what}). {getattr(err, 'ampcourse_report', 'Nothing was changed.')}")
        return 130
    for line in lines:
        print(f"[update] {line}")
    return 0


def _old_templates(root: Path, commit: str) -> dict[str, object]:
    """The exercises as ``build`` made them at ``commit`` (from its solutions/), by file name."""
    import nbformat

    out = {}
    names = _git(root, "ls-tree", "--name-only", commit, "solutions/", check=False).stdout.split()
    for name in names:
        if name.endswith(".ipynb"):
            text = _git(root, "show", f"{commit}:{name}", check=False)
            if text.returncode == 0:
                try:
                    out[Path(name).name] = authoring.make_exercise(nbformat.reads(text.stdout, as_version=4), name)
                except Exception:  # noqa: BLE001 - an old solution that does not build: no old template for it
                    pass
    return out


def _renamed(root: Path, old: str, new: str) -> dict[Path, Path]:
    """``{old exercise path: new path}`` for the exercises (or their solutions) that ``old..new`` renamed."""
    if old == new:
        return {}
    diff = _git(root, "diff", "-M", "--name-status", old, new, "--", "exercises", "solutions", check=False).stdout
    out = {}
    for line in diff.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0].startswith("R") and parts[1].endswith(".ipynb"):
            before, after = Path(parts[1]).name, Path(parts[2]).name
            if before != after and not (root / "exercises" / before).exists():
                out[root / "exercises" / before] = root / "exercises" / after
    return out


def _build_in_fresh_process(root: Path, head: str, backup: str) -> list[str]:
    """``build`` with the course map the pull brought (a new process imports the new ``ampcourse``)."""
    code = ("import json, sys; from pathlib import Path; from ampcourse import update; "
            "print(json.dumps(update.build_after_pull(Path(sys.argv[1]), sys.argv[2], sys.argv[3])))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, "-c", code, str(root), head, backup], cwd=root, env=env,
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise UpdateError(f"the build after the pull failed: {(run.stderr or run.stdout).strip()[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def build_after_pull(root: Path, old_head: str, backup: str = "") -> list[str]:
    """Merge the learner's exercises into the new templates (run in the fresh process). Files of build's own
    backup that the update's backup (``backup``, relative to ``root``) holds byte for byte are not kept twice."""
    result = authoring.build(root, old_templates=_old_templates(root, old_head))
    if result.backup is not None and backup:
        for path in list(result.backup.rglob("*.ipynb")):
            twin = root / backup / path.relative_to(result.backup)
            if twin.is_file() and twin.read_bytes() == path.read_bytes():
                path.unlink()
        if not any(p.is_file() for p in result.backup.rglob("*")):
            shutil.rmtree(result.backup)
            result.backup = None
    return result.lines(root)


def _to_merge(backup: Path | None) -> str:
    return (" to merge your answers into it (until then `grade` warns and `build` refuses)"
            if backup is not None else " (or `python -m ampcourse build`) to bring the exercises up to date")


def run_update(root: Path = ROOT, remote: str | None = None, fresh_process: bool | None = None) -> list[str]:
    """The update itself (see the module docstring); returns the report lines.

    ``fresh_process`` (default: when ``root`` has its own ``ampcourse/``) runs the post-pull build in a new
    Python process, so a renamed or added lesson in the pulled course map is seen.
    """
    if not isinstance(root, Path):
        raise TypeError(f"root must be a pathlib.Path, got {type(root).__name__}")
    if _git(root, "rev-parse", "--is-inside-work-tree", check=False).returncode != 0:
        raise UpdateError(f"{root} is not a git clone: download the new course next to this one and copy "
                          "your exercises/ notebooks into it, then run `python -m ampcourse build` there")
    report = recover(root)
    course_exercises = {p for p in authoring.templates(root) if p.parent == root / "exercises"}
    for path in sorted(course_exercises):
        if path.exists():
            try:
                authoring.read(path)
            except Exception as err:  # noqa: BLE001
                raise UpdateError(f"{path.relative_to(root)} is not a readable notebook ({type(err).__name__}); fix "
                                  "it or restore it from exercises/.backup/ first. Nothing was changed.") from None
    changed = _changed(root)
    saved = {path: path.read_bytes() for path in changed}
    head = _git(root, "rev-parse", "HEAD").stdout.strip()
    # After a recovery, the learner's exercises are as they were before the interrupted update: their old
    # template is the one of the commit that update started from.
    template_head = _RECOVERED_HEAD.pop(root, head) if report else head
    backup = authoring.backup(changed, root)
    if backup is not None:
        (backup / MARKER).write_text(json.dumps({"head": head, "files": [
            p.relative_to(root).as_posix() for p in changed]}), encoding="utf-8")
    where = f" (a copy is in {backup.relative_to(root)}/)" if backup else ""

    def put_back() -> None:
        with _uninterruptible():
            for path, data in saved.items():
                if not path.exists() or path.read_bytes() != data:
                    tmp = path.with_name(f".{path.name}.restore")
                    tmp.write_bytes(data)
                    os.replace(tmp, path)

    def done() -> None:
        if backup is not None and (backup / MARKER).exists():
            (backup / MARKER).unlink()

    pulled = False
    try:
        if changed:
            _git(root, "checkout", "--", *[str(p.relative_to(root)) for p in changed])
        _git(root, *(["pull", "--ff-only"] + ([remote] if remote else [])))
        pulled = True
        new_head = _git(root, "rev-parse", "HEAD").stdout.strip()
        # Put the learner's exercises back (under the new name where upstream renamed one), then merge them
        # into the new templates.
        renamed = _renamed(root, head, new_head)
        lines = []
        for path, data in saved.items():
            if path.parent == root / "exercises":
                target = renamed.get(path, path)
                if target != path:
                    lines.append(f"{path.relative_to(root)} is now {target.relative_to(root)} (renamed in the "
                                 "course): your answers moved with it")
                target.write_bytes(data)
        if fresh_process is None:
            fresh_process = (root / "ampcourse" / "__init__.py").exists()
        rel = backup.relative_to(root).as_posix() if backup else ""
        lines += (_build_in_fresh_process(root, template_head, rel) if fresh_process and new_head != head
                  else build_after_pull(root, template_head, rel))
    except (UpdateError, OSError) as err:
        put_back()
        if isinstance(err, OSError):
            err = f"could not write {getattr(err, 'filename', '') or 'a file'}: {err.strerror or err}"
        if pulled:
            # The marker stays, with the commit this update started from: the next ./course update merges the
            # answers against that commit's templates (a plain build would take the new ones for your edits).
            raise UpdateError(f"{err}\nThe course was pulled, but your notebooks are as they were{where}: fix the "
                              f"problem and run ./course update again{_to_merge(backup)}.") from None
        done()
        raise UpdateError(f"{err}\nNothing was updated; your files are as they were{where}. If your clone has commits "
                          "of its own, `git log` shows them; the course expects you not to commit.") from None
    except BaseException as err:  # Ctrl-C, SIGTERM, SIGHUP, anything unexpected: every notebook back as it was
        put_back()
        if not pulled:
            done()
        err.ampcourse_report = ((f"The course was pulled, but your notebooks are as they were{where}: run "
                                 f"./course update again{_to_merge(backup)}.") if pulled else
                                f"Nothing was updated; your files are as they were{where}.")
        raise
    done()
    lines += prune_backups(root)
    report.append(f"course updated {head[:8]} -> {new_head[:8]}" if new_head != head else "the course was up to date")
    report += lines
    if backup is not None:
        report.append(f"your previous notebooks are backed up in {backup.relative_to(root)}/ "
                      "(`./course update --restore` brings them back)")
    lessons = [p for p in changed if p.parent == root / "notebooks"]
    if lessons:
        report.append(f"lessons you had run were replaced by the new version ({', '.join(p.name for p in lessons)}); "
                      "run them again")
    return report
