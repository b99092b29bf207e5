"""tickwork: a persistent, distributed task scheduler."""

from tickwork.app import App
from tickwork.context import Context
from tickwork.errors import (
    Cancelled,
    InvalidCron,
    InvalidInput,
    InvalidState,
    InvalidTimezone,
    PayloadTooLarge,
    QueueFull,
    StoreError,
    TaskNotFound,
    TickworkError,
    UnknownTask,
)
from tickwork.model import (
    ErrorInfo,
    Execution,
    ExecutionStatus,
    Kind,
    Misfire,
    Node,
    OnLost,
    Overlap,
    Stats,
    Status,
    Task,
)
from tickwork.registry import Isolation
from tickwork.timing import fire_times

__all__ = [
    "App",
    "Cancelled",
    "Context",
    "ErrorInfo",
    "Execution",
    "ExecutionStatus",
    "InvalidCron",
    "InvalidInput",
    "InvalidState",
    "InvalidTimezone",
    "Isolation",
    "Kind",
    "Misfire",
    "Node",
    "OnLost",
    "Overlap",
    "PayloadTooLarge",
    "QueueFull",
    "Stats",
    "Status",
    "StoreError",
    "Task",
    "TaskNotFound",
    "TickworkError",
    "UnknownTask",
    "fire_times",
]
