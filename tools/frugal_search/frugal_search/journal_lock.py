"""The journal file's lock as a POSIX record lock, which the kernel releases when its holder dies.

Optuna's own journal locks are files created with O_EXCL (or symlinks): a worker killed with -9
while it appends leaves the file behind, and every other worker then waits Optuna's 30 s grace
period before breaking it. fcntl.lockf on PATH.lock-posix has no such remains; it works on local
disks and on NFS (v4, or v3 with lockd). Every worker of one journal must use this lock, so all
frugal-search versions since this one do."""

import fcntl
import os
import threading

try:
    from optuna.storages.journal import BaseJournalFileLock
except ImportError:  # not exported by Optuna 4-5; the backend checks for this base class
    from optuna.storages.journal._file import BaseJournalFileLock


class KernelJournalLock(BaseJournalFileLock):
    def __init__(self, journal_path: str) -> None:
        self._path = journal_path + ".lock-posix"
        # Record locks belong to the process: threads of one worker take turns on this first.
        self._threads = threading.Lock()
        self._fd: int | None = None

    def acquire(self) -> bool:
        self._threads.acquire()
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
        except BaseException:
            self._threads.release()
            raise
        self._fd = fd
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        try:
            if fd is not None:
                os.close(fd)  # closing drops the process's record locks on the file
        finally:
            self._threads.release()
