"""A deterministic asyncio event loop with virtual time, for running every node of a cluster in one process.

`SimLoop.time()` is a number the loop alone moves: when no callback is ready it jumps to the next timer
instead of sleeping, so a cluster's minutes of timeouts, heartbeats and long polls pass in the CPU time
their callbacks take. There is no selector, no I/O, no thread and no wall clock: callbacks run in the
order they were scheduled (timers by due time, ties by scheduling order), so the same program gives the
same run every time.

Which node a callback belongs to travels in the context variable NODE, set in the node's root context
(`Process.context`). asyncio copies the current context into every Task and Handle it makes, so
everything a node's coroutines do carries its Process. That gives, for free:
- pause (SIGSTOP): a paused process's ready callbacks are held by the loop, in order, and released on
  resume; its timers still fall due in the meantime, as a stopped process's do;
- kill (SIGKILL): a dead process's callbacks are dropped, its tasks never run again;
- a per-node answer to the broker's clock/randomness/network seam (clusters/broker/hostenv.py), since
  the Process carries the node's Host;
- per-node signal handlers (`add_signal_handler`: SIGTERM asks a node to shut down cleanly) and
  exception handlers (each node logs its own loop exceptions, as in its own process).
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import heapq
from asyncio import format_helpers
from collections.abc import Callable
from typing import Any

# The loop's housekeeping of cancelled timers, as asyncio's own: rebuild the heap when more than half
# of at least this many timers are cancelled (asyncio.wait_for arms and cancels one per call).
_MIN_TIMERS_FOR_SWEEP = 100


class SimDeadlock(RuntimeError):
    """Nothing is ready and no timer is set, yet the loop was asked to go on: the run can never progress."""


class Process:
    """One incarnation of a node: what a process is to an OS. A restart makes a new one."""

    def __init__(self, name: str, incarnation: int, host: Any):
        self.name, self.incarnation, self.host = name, incarnation, host
        self.paused = False
        self.dead = False
        self.held: list[asyncio.Handle] = []  # ready while paused, in order
        self.tasks: list[asyncio.Task] = []  # every task it made (kept: a dead one's never run, nor are collected)
        self.signal_handlers: dict[int, tuple[Callable[..., Any], tuple[Any, ...]]] = {}
        self.exception_handler: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], Any] | None = None
        self.context = contextvars.Context()
        self.context.run(NODE.set, self)

    def __repr__(self) -> str:
        state = "dead" if self.dead else "paused" if self.paused else "running"
        return f"<Process {self.name}#{self.incarnation} {state}>"


NODE: contextvars.ContextVar[Process | None] = contextvars.ContextVar("kafkaesque_sim_process", default=None)


# asyncio's handles, made without asking the loop whether it is in debug mode (the loop asks once, in
# call_soon/call_at: a debug loop makes asyncio's own). Every await that wakes a task makes one: the
# simulation makes millions.
class _Handle(asyncio.Handle):
    __slots__ = ()

    def __init__(self, callback: Callable[..., Any], args: tuple[Any, ...], loop: asyncio.AbstractEventLoop,
                 context: contextvars.Context):
        self._context, self._loop, self._callback, self._args = context, loop, callback, args
        self._cancelled, self._repr, self._source_traceback = False, None, None


class _TimerHandle(asyncio.TimerHandle):
    __slots__ = ()

    def __init__(self, when: float, callback: Callable[..., Any], args: tuple[Any, ...],
                 loop: asyncio.AbstractEventLoop, context: contextvars.Context):
        self._context, self._loop, self._callback, self._args = context, loop, callback, args
        self._cancelled, self._repr, self._source_traceback = False, None, None
        self._when, self._scheduled = when, False


class SimLoop(asyncio.BaseEventLoop):
    def __init__(self, start_s: float = 0.0):
        super().__init__()
        self._now = start_s
        self._clock_resolution = 1e-9
        self._running_process: Process | None = None
        self._processes: list[Process] = []
        self._timer_seq = 0
        self._discarding = False
        self.iterations = 0  # of _run_once: how many distinct moments the run had
        self.unhandled: list[dict[str, Any]] = []  # loop exceptions no process's handler took

    # --- time -----------------------------------------------------------------------------------------
    def time(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[..., Any], *args: Any,
                context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        # The heap holds (due, set order, timer): ties go in the order timers were set (asyncio's heap of
        # TimerHandles compares due times only and leaves equal ones in no promised order; the network's
        # in-order delivery needs this), and tuples compare in C.
        if self._closed:
            raise RuntimeError("Event loop is closed")
        if self._debug:
            timer = asyncio.TimerHandle(when, callback, args, self, context)
        else:
            timer = _TimerHandle(when, callback, args, self,
                                 context if context is not None else contextvars.copy_context())
        self._timer_seq += 1
        heapq.heappush(self._scheduled, (when, self._timer_seq, timer))
        timer._scheduled = True
        return timer

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any,
                   context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        if delay is None:
            raise TypeError("delay must not be None")
        return self.call_at(self._now + delay, callback, *args, context=context)

    def call_soon(self, callback: Callable[..., Any], *args: Any,
                  context: contextvars.Context | None = None) -> asyncio.Handle:
        if self._debug:
            return super().call_soon(callback, *args, context=context)  # with asyncio's checks of the callback
        if self._closed:
            raise RuntimeError("Event loop is closed")
        handle = _Handle(callback, args, self, context if context is not None else contextvars.copy_context())
        self._ready.append(handle)
        return handle

    # --- what BaseEventLoop asks of a concrete loop: nothing to poll ------------------------------------
    def _process_events(self, event_list: Any) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    # --- processes ------------------------------------------------------------------------------------
    def create_task(self, coro: Any, *, name: str | None = None, context: contextvars.Context | None = None
                    ) -> asyncio.Task:
        task = super().create_task(coro, name=name, context=context)
        proc = context.get(NODE) if context is not None else NODE.get()
        if proc is not None:
            if len(proc.tasks) >= 256 and not proc.dead:
                proc.tasks = [t for t in proc.tasks if not t.done()]
            proc.tasks.append(task)
        return task

    def start_process(self, proc: Process, coro: Any) -> asyncio.Task:
        """The process's root task, in a copy of its root context (every task it makes copies that)."""
        if proc not in self._processes:
            self._processes.append(proc)
        return self.create_task(coro, name=f"{proc.name}#{proc.incarnation}", context=proc.context.copy())

    def pause(self, proc: Process) -> None:
        proc.paused = True

    def resume(self, proc: Process) -> None:
        proc.paused = False
        if not proc.dead:
            self._ready.extend(proc.held)
        proc.held = []

    def kill(self, proc: Process) -> None:
        """Its callbacks are dropped from now on; its tasks stay referenced (never collected, so no
        `finally` of theirs runs later, as none runs in a SIGKILLed process)."""
        proc.dead, proc.held = True, []
        for task in proc.tasks:
            task._log_destroy_pending = False

    def discard_processes(self) -> None:
        """At the end of a simulation: close every dead process's coroutines while the loop is open, so
        that their `finally` blocks (run now, into dropped callbacks and /dev/null) do not run later, at
        collection, against a closed loop."""
        # From here on, what the closed coroutines leave (an RPC client's finally failing its pending calls,
        # futures nobody will read) is the simulation's teardown, not the run's: not reported.
        self._discarding = True
        for proc in self._processes:
            if not proc.dead:
                self.kill(proc)
            for task in proc.tasks:
                if task.done():
                    continue
                try:
                    task.get_coro().close()
                except RuntimeError:
                    pass  # a coroutine that awaits in its finally: nothing more of it runs anyway
        gc.collect()  # the futures they failed, collected now, while that is known

    def add_signal_handler(self, sig: int, callback: Callable[..., Any], *args: Any) -> None:
        proc = NODE.get()
        if proc is None:
            raise RuntimeError("the simulated loop takes signal handlers only from a node's process")
        proc.signal_handlers[sig] = (callback, args)

    def remove_signal_handler(self, sig: int) -> bool:
        proc = NODE.get()
        return proc is not None and proc.signal_handlers.pop(sig, None) is not None

    def send_signal(self, proc: Process, sig: int) -> bool:
        """Run the process's handler of `sig` soon, as the process; False when it has none."""
        entry = proc.signal_handlers.get(sig)
        if entry is None or proc.dead:
            return False
        self.call_soon(entry[0], *entry[1], context=proc.context)
        return True

    # --- exceptions: each process's own handler ---------------------------------------------------------
    def set_exception_handler(self, handler: Any) -> None:
        proc = NODE.get()
        if proc is None:
            super().set_exception_handler(handler)
        else:
            proc.exception_handler = handler

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        if self._discarding:
            return
        proc = self._running_process or NODE.get()
        if proc is not None and proc.exception_handler is not None:
            try:
                proc.exception_handler(self, context)
                return
            except Exception as e:  # noqa: BLE001 - a broken handler must not stop the whole cluster
                context = {**context, "handler_error": repr(e)}
        self.unhandled.append({"process": repr(proc), **{k: str(v) for k, v in context.items()}})
        if self._exception_handler is not None:
            self._exception_handler(self, context)

    # --- the one iteration ------------------------------------------------------------------------------
    def _sweep_cancelled_timers(self) -> None:
        scheduled = self._scheduled
        if len(scheduled) > _MIN_TIMERS_FOR_SWEEP and self._timer_cancelled_count * 2 > len(scheduled):
            kept = []
            for entry in scheduled:
                if entry[2]._cancelled:
                    entry[2]._scheduled = False
                else:
                    kept.append(entry)
            heapq.heapify(kept)
            self._scheduled, self._timer_cancelled_count = kept, 0
            scheduled = kept
        while scheduled and scheduled[0][2]._cancelled:
            self._timer_cancelled_count -= 1
            heapq.heappop(scheduled)[2]._scheduled = False

    def _run_once(self) -> None:
        """The moments of the run, one after another until the loop is asked to stop (each moment is one of
        asyncio's iterations: the ready callbacks, then the timers due; run_forever's own loop, around this,
        would only check `_stopping` between them)."""
        scheduled, ready = self._scheduled, self._ready
        while True:
            if scheduled and (scheduled[0][2]._cancelled or self._timer_cancelled_count > _MIN_TIMERS_FOR_SWEEP):
                self._sweep_cancelled_timers()
                scheduled = self._scheduled
            if not ready:
                if not scheduled:
                    if self._stopping:
                        return
                    raise SimDeadlock("no callback is ready and no timer is set: every node waits on another")
                if scheduled[0][0] > self._now:
                    self._now = scheduled[0][0]  # nothing to do until then: jump
            now = self._now
            while scheduled and scheduled[0][0] <= now:
                handle = heapq.heappop(scheduled)[2]
                handle._scheduled = False
                ready.append(handle)
            debug = self._debug
            for _ in range(len(ready)):
                handle = ready.popleft()
                if handle._cancelled:
                    continue
                proc = handle._context.get(NODE)
                if proc is not None:
                    if proc.dead:
                        continue
                    if proc.paused:
                        proc.held.append(handle)
                        continue
                self._running_process = proc
                if debug:
                    handle._run()
                    continue
                # Handle._run, inline: one call less for each of the run's callbacks
                try:
                    handle._context.run(handle._callback, *handle._args)
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:
                    self._callback_failed(handle, exc)
            handle = None  # no cycle through a failed callback's traceback
            self._running_process = None
            self.iterations += 1
            if self._stopping:
                return

    def _callback_failed(self, handle: asyncio.Handle, exc: BaseException) -> None:
        """What Handle._run reports of a callback that raised."""
        cb = format_helpers._format_callback_source(handle._callback, handle._args)
        context = {"message": f"Exception in callback {cb}", "exception": exc, "handle": handle}
        if handle._source_traceback:
            context["source_traceback"] = handle._source_traceback
        self.call_exception_handler(context)
