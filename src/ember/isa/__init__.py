"""The ISA Mapper (issue 16): kernels and hardware instructions in one tensor-expression IR
(expr), Ember's compute ops as expressions (kernels), target descriptions as data files
(describe, targets/*.toml), the mapper that enumerates how a kernel's iteration space lands on
an instruction (mapper), and an analytic scheduler and cost model (schedule).

Layer 5: imports graph/, ops/, types and support/ only, and no other layer-5 package."""
