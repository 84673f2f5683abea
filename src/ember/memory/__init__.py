"""Layer 7: static memory planning. Liveness intervals of the activations that own storage
(views ride on their roots), their placement in one 64-byte-aligned arena, and the report
(arena, lower bound, efficiency). Imports lir/ and lower layers only."""
from ember.memory.liveness import ALIGNMENT, Interval, aligned, live_intervals, max_live_bytes
from ember.memory.placement import Placement, place
from ember.memory.planner import plan_memory
from ember.memory.report import BufferPlacement, MemoryPlan, format_plan

__all__ = [
    "ALIGNMENT", "BufferPlacement", "Interval", "MemoryPlan", "Placement", "aligned", "format_plan",
    "live_intervals", "max_live_bytes", "place", "plan_memory",
]
