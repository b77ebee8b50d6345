"""A deterministic asyncio event loop on virtual time, for simulating the real runtime.

Theory of operation (FoundationDB's simulation, on asyncio):
1. `SimLoop` is a `SelectorEventLoop` whose clock (`time()`) is a number the loop moves
   itself, and whose selector (`_VirtualSelector`) has no file descriptors to wait on:
   asked to wait `timeout` seconds for I/O, it moves the clock forward by that much and
   reports nothing ready. The loop's own scheduling then runs the timers that came due.
   So `asyncio.sleep`, `call_later` and `wait_for` take no real time, and a run is as
   long as the work it does, not the time it simulates.
2. Nothing outside the loop runs: `run_in_executor` runs the function on the loop's
   thread after a delay drawn from the loop's `random.Random` (the sync of a write-ahead
   log takes a little virtual time, so rounds overlap with other events as they do on a
   real disk, and a crash in that time loses the batch, as a power cut would).
3. Ready callbacks run in the order they were scheduled and timers in the order of
   their time; timers due at the same time run in the order of asyncio's heap, which is
   not their order of scheduling but is the same on every run with the same history.
   So one seed gives one order of events: the whole run replays exactly. (What must keep
   an order, such as the messages on one link, is given distinct times.)
4. Lives: every simulated node runs in a `contextvars.Context` holding its `Life`, and
   every callback, task step and future callback the loop schedules carries the context
   it was scheduled from. A crash sets the node's `Life.alive` to False, and from then
   on nothing that node scheduled runs: its tasks never step again, its timers never
   fire, exactly as if the process had died. The world's own callbacks have no life. What
   the world or another node does to a node synchronously (its links go up or down when
   another node starts or crashes, or a partition heals) runs in that node's life
   (`Life.run`): run in the caller's, what the node scheduled then would outlive its
   crash, or die with the wrong node.
5. A loop with nothing scheduled and nothing ready has deadlocked (no timer will ever
   fire), one that turns `LIVELOCK_TURNS` times without its clock moving is spinning
   (callbacks scheduling each other forever), and one past `RUNAWAY_TURNS` in all runs
   away (busy forever, in small steps of time): the selector raises `SimDeadlock`, and a
   seed reports it as its violation instead of hanging the run of seeds.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import selectors
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, TypeVarTuple, Unpack

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

# virtual seconds a function run "in an executor" (a WAL sync) takes
EXECUTOR_DELAY_S_MAX = 0.002
# loop turns at one instant that can only be callbacks scheduling each other forever
LIVELOCK_TURNS = 1_000_000
# loop turns in one run: a hundred times what a seed of the stack simulator takes
RUNAWAY_TURNS = 3_000_000


class SimDeadlock(RuntimeError):
    """The simulated loop has nothing ready and no timer: nothing can ever happen again."""


class _VirtualSelector(selectors.BaseSelector):
    """A selector with no real waiting: `select(timeout)` moves the loop's clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self._turns = 0  # loop turns since the clock last moved
        self._all_turns = 0
        self._keys: dict[int, selectors.SelectorKey] = {}

    def register(
        self, fileobj: FileDescriptorLike, events: int, data: Any = None
    ) -> selectors.SelectorKey:
        key = selectors.SelectorKey(fileobj, _fd(fileobj), events, data)
        self._keys[key.fd] = key
        return key

    def unregister(self, fileobj: FileDescriptorLike) -> selectors.SelectorKey:
        return self._keys.pop(_fd(fileobj))

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise SimDeadlock("nothing is scheduled: the simulated world stopped")
        self._all_turns += 1
        if self._all_turns > RUNAWAY_TURNS:
            raise SimDeadlock(f"runaway: {RUNAWAY_TURNS} loop turns (at {self.now:.1f} s)")
        if timeout > 0:
            self.now += timeout
            self._turns = 0
        else:
            self._turns += 1
            if self._turns > LIVELOCK_TURNS:
                raise SimDeadlock(
                    f"livelock: {LIVELOCK_TURNS} loop turns without time moving on "
                    f"(at {self.now * 1000:.1f} ms)"
                )
        return []

    def get_map(self) -> Mapping[FileDescriptorLike, selectors.SelectorKey]:
        return {key.fileobj: key for key in self._keys.values()}

    def close(self) -> None:
        self._keys.clear()


def _fd(fileobj: FileDescriptorLike) -> int:
    return fileobj if isinstance(fileobj, int) else fileobj.fileno()


class SimLoop(asyncio.SelectorEventLoop):
    """See the module docstring."""

    def __init__(self, rng: random.Random) -> None:
        self._virtual = _VirtualSelector()
        super().__init__(self._virtual)
        self._rng = rng
        # no real clock's granularity: timers due "now" run now
        self._clock_resolution = 1e-9

    def time(self) -> float:
        return self._virtual.now

    def run_in_executor(
        self, executor: object, func: Callable[[Unpack[Ts]], T], *args: *Ts
    ) -> asyncio.Future[T]:
        future: asyncio.Future[T] = self.create_future()
        self.call_later(self._rng.uniform(0.0, EXECUTOR_DELAY_S_MAX), _run, future, func, args)
        return future

    def call_soon(
        self,
        callback: Callable[[Unpack[Ts]], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        life = _LIFE.get(None) if context is None else context.get(_LIFE)
        if life is None:
            return super().call_soon(callback, *args, context=context)
        return super().call_soon(_guarded, life, callback, args, context=context)

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[Ts]], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        life = _LIFE.get(None) if context is None else context.get(_LIFE)
        if life is None:
            return super().call_at(when, callback, *args, context=context)
        return super().call_at(when, _guarded, life, callback, args, context=context)


class Life:
    """One run of one simulated node process (see point 4)."""

    __slots__ = ("alive", "context", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.alive = True
        self.context = contextvars.copy_context()
        self.context.run(_LIFE.set, self)

    def spawn(self, coroutine: Coroutine[object, object, T]) -> asyncio.Task[T]:
        """Run `coroutine` as part of this life."""
        return asyncio.get_running_loop().create_task(coroutine, context=self.context)

    def soon(self, delay_s: float, callback: Callable[[Unpack[Ts]], object], *args: *Ts) -> None:
        """Call `callback` in this life after `delay_s`."""
        asyncio.get_running_loop().call_later(delay_s, callback, *args, context=self.context)

    def run(self, callback: Callable[[Unpack[Ts]], object], *args: *Ts) -> None:
        """Call `callback` now as part of this life (not at all once it is over): for
        what another life or the world does to this node synchronously (point 4)."""
        if not self.alive:
            return
        if _LIFE.get(None) is self:
            callback(*args)
        else:
            self.context.run(callback, *args)


_LIFE: contextvars.ContextVar[Life] = contextvars.ContextVar("warren_sim_life")


def _guarded(life: Life, callback: Callable[..., object], args: tuple[object, ...]) -> None:
    if life.alive:
        callback(*args)


def _run(future: asyncio.Future[T], func: Callable[..., T], args: tuple[object, ...]) -> None:
    if future.done():
        return
    try:
        result = func(*args)
    except Exception as error:  # the caller's future carries it, as an executor's would
        future.set_exception(error)
    else:
        future.set_result(result)
