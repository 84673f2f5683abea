"""Register tiles for a length-agnostic vector unit (RISC-V V: `C[j] += A[] * B[j] over j:<=8`),
written as one inline-assembly statement per column strip from the register file's `asm`
templates and the instruction's `emit` template.

Why assembly: the accumulators must stay in vector registers across the whole reduction loop,
and compilers without vector intrinsics (GCC 12, Debian's cross compiler) cannot name those
registers; a single asm statement that owns its registers from the first load to the last
store is correct whatever the compiler does around it.

Length agnostic: the tile's N columns (the packed panel's NR, or fewer in the last panel) are
covered in strips of `vectors` vectors, each of the length the hardware grants for the columns
left (vsetvli), so the same code runs on any VLEN and a partial panel needs no padded copy; on
the VLEN the description assumes, a full panel is one strip. Imports isa.describe only."""
from __future__ import annotations

from ember.isa.describe import ASM_TEXT

FLOAT_SCRATCH = 16  # f0..f15 hold one broadcast A element per row of the tile


def vla_tile(name: str, rows: int, vectors: int, types: tuple[str, str, str], itemsize: int,
             templates: dict[str, str], b_templates: dict[str, str], emit: str, tensors: tuple[str, str, str]
             ) -> list[str]:
    """The C function `{name}_tile{rows}(kc, a, a_rs, a_ks, bp, b_ks, c, ldc, first, ncols)`:
    c[r][j] (+)= sum over k of a[k*a_ks + r*a_rs] * bp[k*b_ks + j] for r < rows, j < ncols.
    types: the C types of A, B and C elements; itemsize: the bytes of a B and a C lane (the
    same); tensors: the names of the instruction's C, A and B operands in `emit`."""
    for text in (emit, *templates.values(), *b_templates.values()):
        if not ASM_TEXT.fullmatch(text):
            raise ValueError(f"{text!r} is not one assembly instruction")
    if rows > FLOAT_SCRATCH or vectors * (rows + 1) > 32:
        raise ValueError(f"a {rows} x {vectors} tile does not fit the vector and scalar registers")
    if itemsize not in (1, 2, 4, 8):
        raise ValueError(f"lanes of {itemsize} bytes")
    shift = itemsize.bit_length() - 1
    ta, tb, tc = types
    out, a_name, b_name = tensors
    b_reg = [f"v{v}" for v in range(vectors)]
    acc = [[f"v{vectors + r * vectors + v}" for v in range(vectors)] for r in range(rows)]
    scalar = [f"f{r}" for r in range(rows)]

    def fill(template: str, **values: str) -> str:
        for key, value in values.items():
            template = template.replace("{" + key + "}", value)
        return template

    def setvl(v: int) -> str:
        return fill(templates["setvl"], vl="zero", n=f"%[vl{v}]")

    def fma(r: int, v: int) -> str:
        return emit.replace(f"{{{out}}}", acc[r][v]).replace(f"{{{a_name}}}", scalar[r]).replace(
            f"{{{b_name}}}", b_reg[v])

    def advance(v: int) -> list[str]:
        """u past vector v's columns (t is free here)."""
        return [f"slli %[t], %[vl{v}], {shift}", "add %[u], %[u], %[t]"] if v + 1 < vectors else []

    def rows_of(template: str) -> list[str]:
        """Every accumulator at its C address: u walks along the strip, t down the rows."""
        body = ["mv %[u], %[c]"]
        for v in range(vectors):
            body += [setvl(v), "mv %[t], %[u]"]
            for r in range(rows):
                body.append(fill(template, v=acc[r][v], p="%[t]"))
                if r + 1 < rows:
                    body.append("add %[t], %[t], %[ldc]")
            body += advance(v)
        return body

    asm: list[str] = ["bnez %[first], 1f", *rows_of(templates["load"]), "j 2f", "1:"]
    for v in range(vectors):
        asm += [setvl(v), *(fill(templates["zero"], v=acc[r][v]) for r in range(rows))]
    asm += ["2:", "beqz %[k], 4f", "3:", "mv %[t], %[a]"]
    for r in range(rows):
        asm.append(fill(templates["scalar"], s=scalar[r], p="%[t]"))
        if r + 1 < rows:
            asm.append("add %[t], %[t], %[ars]")
    asm.append("mv %[u], %[b]")
    for v in range(vectors):
        asm += [setvl(v), fill(b_templates["load"], v=b_reg[v], p="%[u]"), *(fma(r, v) for r in range(rows)),
                *advance(v)]
    asm += ["add %[a], %[a], %[aks]", "add %[b], %[b], %[bks]", "addi %[k], %[k], -1", "bnez %[k], 3b", "4:",
            *rows_of(templates["store"])]

    grants = [f"        vl{v} = ember_vl(ncols - col{''.join(f' - vl{u}' for u in range(v))});"
              for v in range(vectors)]
    clobbers = ", ".join(f'"v{i}"' for i in range(vectors * (rows + 1)))
    lengths = ", ".join(f'[vl{v}] "r"(vl{v})' for v in range(vectors))
    float_clobbers = ", ".join(f'"{s}"' for s in scalar)
    return [
        f"static void {name}_tile{rows}(long kc, const {ta} *a, long a_rs, long a_ks, const {tb} *bp, long b_ks, "
        f"{tc} *c, long ldc, int first, long ncols) {{",
        "    for (long col = 0; col < ncols;) {",
        f"        long {', '.join(f'vl{v}' for v in range(vectors))};",
        *grants,
        f"        const {ta} *pa = a;",
        f"        const {tb} *pb = bp + col;",
        "        long k = kc;",
        "        void *t, *u;",
        "        __asm__ volatile(",
        *(f'            "{line}\\n\\t"' for line in asm),
        "            : [a] \"+r\"(pa), [b] \"+r\"(pb), [k] \"+r\"(k), [t] \"=&r\"(t), [u] \"=&r\"(u)",
        f"            : [c] \"r\"(c + col), [ldc] \"r\"((long)sizeof({tc}) * ldc), [first] \"r\"(first),",
        f"              [ars] \"r\"((long)sizeof({ta}) * a_rs), [aks] \"r\"((long)sizeof({ta}) * a_ks),",
        f"              [bks] \"r\"((long)sizeof({tb}) * b_ks),",
        f"              {lengths}",
        f"            : \"memory\", {float_clobbers} EMBER_VECTOR_CLOBBERS({clobbers}));",
        f"        col += {' + '.join(f'vl{v}' for v in range(vectors))};",
        "    }",
        "}",
        "",
    ]


def vla_prelude(templates: dict[str, str]) -> list[str]:
    """ember_vl(n): the length the hardware grants for n elements (at most VLMAX); and the
    clobbers of vector registers, named only to compilers that know them (GCC 12 does not,
    and never uses them itself)."""
    grant = templates["setvl"].replace("{vl}", "%0").replace("{n}", "%1")
    return [
        "#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 13)",
        "#define EMBER_VECTOR_CLOBBERS(...) , __VA_ARGS__",
        "#else",
        "#define EMBER_VECTOR_CLOBBERS(...)",
        "#endif",
        "static inline long ember_vl(long n) {",
        "    long vl;",
        f"    __asm__ volatile(\"{grant}\" : \"=r\"(vl) : \"r\"(n));",
        "    return vl;",
        "}",
        "",
    ]
