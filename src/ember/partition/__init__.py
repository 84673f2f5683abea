"""Layer 5: partitioning a graph across backends (TVM's bring-your-own-codegen flow, Glow's
partitioner): annotate nodes and pattern matches with the targets that can run them, assign
each to a target (priority or cost), cut a cycle-free sequence of segments and outline each
as a graph of its own. Imports graph/, ops/ and support/ only: targets are a protocol."""
from ember.partition.partitioner import (
    Annotation,
    Target,
    Unit,
    annotate,
    assign_by_priority,
    form_segments,
    partition_graph,
    unit_order,
)
from ember.partition.patterns import Match, Pattern, match_chains
from ember.partition.segments import Partition, Segment, compute_borders, outline, verify_partition

__all__ = ["Annotation", "Match", "Partition", "Pattern", "Segment", "Target", "Unit", "annotate",
           "assign_by_priority", "compute_borders", "form_segments", "match_chains", "outline",
           "partition_graph", "unit_order", "verify_partition"]
