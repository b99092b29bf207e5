"""Arguments checked against the task's signature when it is registered and scheduled
(tickwork/binding.py), and ``context=False`` tasks called without a context on a real
node, in a thread, on the event loop and in a child process."""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.test_worker import Node
from tickwork import App, Context, ExecutionStatus, InvalidInput, Status
from tickwork.binding import CONTEXT, check_call, check_signature
from tickwork.registry import Isolation, Registry, TaskDef, TaskOptions

WITH_CONTEXT = TaskOptions()
WITHOUT_CONTEXT = TaskOptions(context=False)


def definition(func: Callable[..., Any], *, context: bool = True, name: str = "myapp.job") -> TaskDef:
    return TaskDef(name, func, WITH_CONTEXT if context else WITHOUT_CONTEXT)


def refusal(func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], *, context: bool = True) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        check_call(definition(func, context=context), args, kwargs)
    return caught.value


# -- registration: check_signature ------------------------------------------------------


def send_email(ctx: Context, to: str, subject: str = "hello") -> None: ...


def no_params() -> None: ...


def keyword_context(*, ctx: Context) -> None: ...


def only_kwargs(**kwargs: Any) -> None: ...


def star_args(*args: Any) -> None: ...


async def async_job(ctx: Context, n: int) -> int:
    return n


class TaskClass:
    def __init__(self, ctx: Context, n: int) -> None: ...


class NoContextClass:
    def __init__(self) -> None: ...


class CallableTask:
    def __call__(self, ctx: Context, n: int) -> None: ...

    def method(self, ctx: Context, n: int) -> None: ...


def passes_context_on(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


@pytest.mark.parametrize(
    "func",
    [
        send_email,
        star_args,
        async_job,
        TaskClass,
        CallableTask(),
        CallableTask().method,
        functools.partial(send_email, subject="x"),
        passes_context_on(send_email),
        lambda ctx, /: None,
        len,  # a builtin: (obj, /)
        dict,  # no signature Python can read: accepted unchecked
    ],
    ids=[
        "function",
        "star_args",
        "async",
        "class",
        "callable_object",
        "method",
        "partial",
        "wrapped",
        "lambda",
        "builtin",
        "unreadable",
    ],
)
def test_a_function_that_can_take_the_context_first_is_accepted(func: Callable[..., Any]) -> None:
    check_signature(func, context=True)


@pytest.mark.parametrize(
    ("func", "shown"),
    [
        (no_params, "test_binding.no_params"),
        (keyword_context, "test_binding.keyword_context"),
        (only_kwargs, "test_binding.only_kwargs"),
        (NoContextClass, "test_binding.NoContextClass"),
        (functools.partial(send_email, None, "a", "b"), "functools.partial"),  # the context's place is taken
        (passes_context_on(no_params), "test_binding.no_params"),  # checked as the function it wraps
    ],
    ids=["no_params", "keyword_context", "only_kwargs", "class", "partial", "wrapped"],  # stable across processes
)
def test_a_function_that_cannot_take_the_context_is_refused_with_how_to_declare_it(
    func: Callable[..., Any], shown: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_signature(func, context=True)
    error = caught.value
    assert error.field == "func" and shown in str(error.value)
    assert "cannot take the context as its first parameter" in error.reason
    assert "def f(ctx, ...)" in error.reason and "@app.task(context=False)" in error.reason


def test_the_refusal_says_what_is_wrong_with_the_first_parameter() -> None:
    with pytest.raises(InvalidInput, match="'ctx' is keyword-only"):
        check_signature(keyword_context, context=True)
    with pytest.raises(InvalidInput, match="it takes no parameters"):
        check_signature(no_params, context=True)
    with pytest.raises(InvalidInput, match="it takes keyword arguments only"):
        check_signature(only_kwargs, context=True)


@pytest.mark.parametrize("func", [no_params, keyword_context, only_kwargs, NoContextClass, send_email])
def test_without_context_any_signature_is_accepted(func: Callable[..., Any]) -> None:
    check_signature(func, context=False)


def test_something_that_is_not_callable_is_refused_either_way() -> None:
    for context in (True, False):
        with pytest.raises(InvalidInput, match="a task must be a function") as caught:
            check_signature("myapp.job", context=context)  # type: ignore[arg-type]
        assert caught.value.field == "func"


def test_the_registry_refuses_a_function_without_a_context_and_registers_nothing() -> None:
    registry = Registry()
    with pytest.raises(InvalidInput, match=r"func='tests\.test_binding\.no_params': cannot take the context"):
        registry.add("myapp.no_params", no_params, TaskOptions())
    assert registry.get("myapp.no_params") is None and registry.names() == []
    with pytest.raises(InvalidInput):
        registry.resolve(no_params)


def test_the_registry_takes_a_function_without_a_context_when_told_to_call_it_without_one() -> None:
    registry = Registry()
    added = registry.add("myapp.no_params", no_params, TaskOptions(context=False))
    assert registry.resolve(no_params) is added and added.options.context is False
    assert TaskOptions().context is True  # the default: the node passes the context


# -- scheduling: check_call ------------------------------------------------------------


def test_a_call_that_binds_is_accepted() -> None:
    check_call(definition(send_email), [], {"to": "a@example.com"})
    check_call(definition(send_email), ["a@example.com", "subject"], {})
    check_call(definition(send_email), ["a@example.com"], {"subject": "s"})
    check_call(definition(no_params, context=False), [], {})
    check_call(definition(dict), [1, 2, 3], {"anything": 1})  # unreadable signature: unchecked


def test_a_form_of_call_once_accepted_lets_no_other_form_through() -> None:
    """Accepted forms (context, positional count, keyword names) are remembered per
    function; a different form, or the same under another context setting, is checked."""

    def job(ctx: Context, to: str, subject: str = "hello") -> None: ...

    check_call(definition(job), [], {"to": "a"})
    check_call(definition(job), [], {"to": "b"})  # remembered
    assert refusal(job, [], {}).value == "to"
    assert refusal(job, [], {"to": "a", "cc": "b"}).value == "cc"
    assert refusal(job, ["a", "b", "c"], {}).field == "args"
    assert refusal(job, [], {"to": "a"}, context=False).value == "ctx"  # no context: ctx is missing


def test_the_forms_remembered_per_function_are_bounded() -> None:
    from tickwork.binding import ACCEPTED_FORMS, _shape_of

    def job(ctx: Context, **named: Any) -> None: ...

    for i in range(ACCEPTED_FORMS * 2):
        check_call(definition(job), [], {f"name{i}": i})
    shape = _shape_of(job)
    assert shape is not None and len(shape.accepted) == ACCEPTED_FORMS


def test_a_missing_keyword_names_kwargs_and_the_parameter() -> None:
    error = refusal(send_email, [], {"subject": "s"})
    assert (error.field, error.value) == ("kwargs", "to")
    assert error.reason == "missing required argument 'to' of myapp.job"


def test_every_missing_argument_is_listed_and_the_first_is_named() -> None:
    def job(ctx: Context, a: int, b: int, *, c: int, d: int = 0) -> None: ...

    error = refusal(job, [], {})
    assert (error.field, error.value) == ("kwargs", "a")
    assert error.reason == "missing required arguments 'a', 'b', 'c' of myapp.job"


def test_an_unexpected_keyword_names_kwargs_the_parameter_and_what_the_function_takes() -> None:
    error = refusal(send_email, [], {"to": "a", "subjcet": "typo"})
    assert (error.field, error.value) == ("kwargs", "subjcet")
    assert error.reason == "unexpected argument 'subjcet' of myapp.job; it takes: to, subject"


def test_an_unexpected_keyword_of_a_function_without_keywords_says_so() -> None:
    def job(ctx: Context, n: int, /) -> None: ...

    error = refusal(job, [1], {"x": 1})
    assert (error.field, error.value) == ("kwargs", "x")
    assert error.reason.endswith("; it takes no keyword arguments")


def test_too_many_positional_arguments_name_args() -> None:
    error = refusal(send_email, ["a", "b", "c"], {})
    assert (error.field, error.value) == ("args", ["a", "b", "c"])
    assert error.reason == "myapp.job takes 2 positional arguments after the context, 3 given"
    error = refusal(no_params, [1], {}, context=False)
    assert (error.field, error.reason) == ("args", "myapp.job takes 0 positional arguments, 1 given")


def test_an_argument_given_both_by_position_and_by_name_is_refused() -> None:
    error = refusal(send_email, ["a"], {"to": "b"})
    assert (error.field, error.value) == ("kwargs", "to")
    assert "given twice: in args and in kwargs" in error.reason


def test_the_context_parameter_cannot_be_given_in_kwargs() -> None:
    error = refusal(send_email, [], {"ctx": 1, "to": "a"})
    assert (error.field, error.value) == ("kwargs", "ctx")
    assert "is the context, which the node passes" in error.reason
    check_call(definition(send_email, context=False), [], {"ctx": 1, "to": "a"})  # an ordinary argument then


def test_positional_only_parameters_must_come_in_args() -> None:
    def job(ctx: Context, n: int, /, m: int = 0) -> None: ...

    error = refusal(job, [], {"n": 1})
    assert (error.field, error.value) == ("kwargs", "n")
    assert error.reason == "argument 'n' of myapp.job is positional-only: give it in args"
    error = refusal(job, [], {})
    assert (error.field, error.value) == ("args", "n")
    assert error.reason == "missing required positional-only argument 'n' of myapp.job: give it in args"
    check_call(definition(job), [1], {"m": 2})


def test_keyword_only_parameters_and_defaults() -> None:
    def job(ctx: Context, *, region: str, limit: int = 10) -> None: ...

    check_call(definition(job), [], {"region": "eu"})
    assert refusal(job, [], {"limit": 1}).value == "region"
    error = refusal(job, ["eu"], {})
    assert error.field == "args" and "takes 0 positional arguments after the context, 1 given" in error.reason


def test_star_args_and_star_kwargs_take_what_they_are_given() -> None:
    def job(ctx: Context, first: int, *rest: int, **options: Any) -> None: ...

    check_call(definition(job), [1, 2, 3], {"anything": 1, "rest": 2, "options": 3})
    assert refusal(job, [], {"anything": 1}).value == "first"

    def only_star(ctx: Context, *rest: int) -> None: ...

    assert refusal(only_star, [1, 2], {"rest": [3]}).reason == (
        "unexpected argument 'rest' of myapp.job; it takes no keyword arguments"
    )


def test_partial_decorated_async_class_callable_object_and_method_are_bound_as_called() -> None:
    check_call(definition(functools.partial(send_email, subject="s")), ["a"], {})
    assert refusal(functools.partial(send_email, to="a"), ["a"], {}).field == "args"  # partial's to= is keyword
    assert refusal(passes_context_on(send_email), [], {"x": 1}).value == "x"  # the wrapped function's signature
    check_call(definition(async_job), [1], {})
    assert refusal(async_job, [], {}).value == "n"
    for func in (TaskClass, CallableTask(), CallableTask().method):
        check_call(definition(func), [], {"n": 1})
        assert refusal(func, [], {"m": 1}).reason == "unexpected argument 'm' of myapp.job; it takes: n"


def test_the_message_shows_the_task_name() -> None:
    with pytest.raises(InvalidInput, match=r"kwargs='to': missing required argument 'to' of emails\.send"):
        check_call(definition(send_email, name="emails.send"), [], {})


@dataclass(frozen=True)
class Shape:
    """A signature to generate: how many parameters of each kind, how many defaulted."""

    positional_only: int
    positional: int
    var_positional: bool
    keyword_only: int
    var_keyword: bool
    defaults: int

    def source(self) -> str:
        names = iter(["ctx", "a", "b", "c", "d", "e"])
        params = [next(names) for _ in range(self.positional_only + self.positional)]
        first_default = len(params) - self.defaults
        params = [f"{p}=0" if i >= first_default else p for i, p in enumerate(params)]
        if self.positional_only:
            params.insert(self.positional_only, "/")
        if self.var_positional:
            params.append("*args")
        elif self.keyword_only:
            params.append("*")
        params += [f"{next(names)}{'=0' if i < self.defaults else ''}" for i in range(self.keyword_only)]
        if self.var_keyword:
            params.append("**kw")
        return f"def f({', '.join(params)}):\n    return None\n"


def shapes() -> Iterator[Shape]:
    for counts in itertools.product(range(3), range(3), (False, True), range(2), (False, True), range(3)):
        yield Shape(*counts)


def calls() -> Iterator[tuple[list[Any], dict[str, Any]]]:
    keys = ["ctx", "a", "b", "c", "args", "kw", "zz"]
    for n in range(4):
        for chosen in itertools.chain.from_iterable(itertools.combinations(keys, r) for r in range(3)):
            yield list(range(n)), dict.fromkeys(chosen, 1)


def test_check_call_refuses_exactly_the_calls_python_refuses() -> None:
    """Every kind of parameter, with and without defaults, against real calls: what the
    check accepts, the function takes, and what it refuses, the function refuses."""
    disagreements = []
    for shape in shapes():
        namespace: dict[str, Any] = {}
        exec(shape.source(), namespace)
        func = namespace["f"]
        for context, (args, kwargs) in itertools.product((True, False), calls()):
            try:
                func(*([CONTEXT, *args] if context else args), **kwargs)
            except TypeError:
                python_accepts = False
            else:
                python_accepts = True
            try:
                check_call(definition(func, context=context), args, kwargs)
            except InvalidInput as exc:
                assert exc.field in ("args", "kwargs") and "myapp.job" in exc.reason, exc
                accepted = False
            else:
                accepted = True
            if accepted != python_accepts:
                disagreements.append((shape.source().splitlines()[0], context, args, kwargs, python_accepts))
    assert disagreements == []


# -- on a node: context=False tasks get their arguments and no context ------------------


def add_thread(a: int, b: int, *, scale: int = 1) -> list[Any]:
    return [(a + b) * scale]


async def add_async(a: int, b: int, *, scale: int = 1) -> list[Any]:
    await asyncio.sleep(0)
    return [(a + b) * scale]


def add_process(a: int, b: int, *, scale: int = 1) -> list[Any]:
    return [(a + b) * scale]


async def add_async_process(a: int, b: int, *, scale: int = 1) -> list[Any]:
    await asyncio.sleep(0)
    return [(a + b) * scale]


def attempt_process(ctx: Context, a: int) -> list[Any]:
    return [ctx.attempt, a]


FLAVOURS: dict[str, tuple[Callable[..., Any], Isolation]] = {
    "thread": (add_thread, Isolation.THREAD),
    "async": (add_async, Isolation.THREAD),
    "process": (add_process, Isolation.PROCESS),
    "async-process": (add_async_process, Isolation.PROCESS),
}


@pytest.fixture
def node_app(sqlite_url: str) -> Iterator[App]:
    app = App(sqlite_url, lease=5.0, heartbeat=0.2, poll_interval=0.1, shutdown_grace=5.0)
    for flavour, (func, isolation) in FLAVOURS.items():
        app.registry.add(f"binding.{flavour}", func, TaskOptions(context=False, isolation=isolation))
    app.registry.add("binding.attempt_process", attempt_process, TaskOptions(isolation=Isolation.PROCESS))
    yield app
    app.close()


def test_context_false_tasks_run_with_their_arguments_alone_in_every_isolation(node_app: App) -> None:
    tasks = {
        flavour: node_app.schedule(f"binding.{flavour}", args=[2, 3], kwargs={"scale": 10}) for flavour in FLAVOURS
    }
    with_context = node_app.schedule("binding.attempt_process", args=[7])
    node = Node(node_app)
    try:
        wait_for(lambda: all(node_app.get(t.id).status.is_terminal for t in [*tasks.values(), with_context]))
    finally:
        node.stop()
    for flavour, task in tasks.items():
        [run] = node_app.executions(task.id)
        assert (flavour, run.status, run.result, run.error) == (flavour, ExecutionStatus.COMPLETED, [50], None)
        assert node_app.get(task.id).status is Status.COMPLETED
    [run] = node_app.executions(with_context.id)
    assert (run.status, run.result) == (ExecutionStatus.COMPLETED, [1, 7])  # the context still comes first


# -- through the App: to run once App.task(context=...) and planning's check_call are in --


@pytest.fixture
def app(sqlite_url: str) -> Iterator[App]:
    app = App(sqlite_url)
    app.task(name="emails.send")(send_email)
    yield app
    app.close()


def test_app_schedule_refuses_a_missing_kwarg_and_stores_nothing(app: App) -> None:
    with pytest.raises(InvalidInput, match=r"kwargs='to': missing required argument 'to' of emails\.send") as caught:
        app.schedule("emails.send", kwargs={"subject": "s"}, cron="0 9 * * *")
    assert caught.value.field == "kwargs"
    assert app.tasks() == []


def test_app_schedule_refuses_an_unexpected_kwarg_and_stores_nothing(app: App) -> None:
    with pytest.raises(InvalidInput, match=r"kwargs='subjcet': unexpected argument 'subjcet'.*it takes: to, subject"):
        app.schedule(send_email, kwargs={"to": "a", "subjcet": "s"})
    assert app.tasks() == []


def test_app_schedule_refuses_too_many_args_naming_args(app: App) -> None:
    with pytest.raises(InvalidInput, match=r"^args=\['a', 'b', 'c'\]: .*takes 2 positional arguments") as caught:
        app.schedule("emails.send", args=["a", "b", "c"])
    assert caught.value.field == "args"
    assert app.tasks() == []


def test_app_schedule_many_names_the_item_whose_arguments_do_not_bind(app: App) -> None:
    items = [dict(task="emails.send", kwargs={"to": "a"}), dict(task="emails.send", kwargs={"to": "a", "x": 1})]
    with pytest.raises(InvalidInput, match=r"items\[1\]\.kwargs='x': unexpected argument 'x'"):
        app.schedule_many(items)
    assert app.tasks() == []


def test_app_task_refuses_a_function_without_a_context_and_says_how_to_declare_it(app: App) -> None:
    with pytest.raises(InvalidInput, match=r"func='tests\.test_binding\.no_params'.*def f\(ctx, \.\.\.\)"):
        app.task(no_params)
    assert "tests.test_binding.no_params" not in app.registry.names()


def test_app_task_context_false_registers_a_function_called_without_the_context(app: App) -> None:
    registered = app.task(name="plain.add", context=False)(add_thread)
    assert registered is add_thread and app.registry.resolve("plain.add").options.context is False
    with pytest.raises(InvalidInput, match=r"kwargs='b': missing required argument 'b' of plain\.add"):
        app.schedule("plain.add", args=[1])
    assert app.schedule("plain.add", args=[1, 2]).args == [1, 2]
