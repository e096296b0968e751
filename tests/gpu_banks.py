"""Shared-memory bank conflicts of one GPU thread block, and what each thread reads through ldmatrix, on the CPU.

`simulate` runs a device kernel as TVM lowers it for CUDA (`lower`: the loops, addresses and intrinsic calls that
code generation prints) for one thread block: every thread at once as numpy vectors, loops in program order, barriers
assumed where the kernel has them. It follows addresses, not arithmetic: each shared-memory store, load, cp.async and
ldmatrix becomes warp-level instructions whose lanes' byte addresses are counted against NVIDIA's bank rules, and
shared memory holds for each 2-byte element a tag naming the global element copied there, so what ldmatrix hands each
thread can be compared between two layouts of the same loops.

The rules: 32 banks of 4 bytes. An instruction is served in phases of 32 lanes when each lane accesses at most 4
bytes, 16 lanes for 8 bytes and 8 lanes for 16 bytes (vector stores, cp.async; ldmatrix, whose lanes 8i..8i+7 each
give one 16-byte row of matrix i). A phase takes as many wavefronts as the most distinct 4-byte words its lanes touch
in any one bank (lanes on the same word share it); every wavefront past the first of a phase is a conflict.
"""

from __future__ import annotations

import dataclasses

import numpy as np

BANKS, BANK_BYTES, WARP = 32, 4, 32
UNWRITTEN, CONSTANT = -1, -2  # tags of shared elements no copy wrote, and of constants (a padded tile's zeros)
_GLOBAL_SHIFT = 40  # tag = (global buffer number << _GLOBAL_SHIFT) + element index

_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "FloorDiv": np.floor_divide, "FloorMod": np.mod,
           "Div": np.floor_divide, "Mod": np.mod, "Min": np.minimum, "Max": np.maximum, "LT": np.less,
           "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal, "EQ": np.equal, "NE": np.not_equal,
           "And": np.logical_and, "Or": np.logical_or, "BitwiseXor": np.bitwise_xor, "BitwiseAnd": np.bitwise_and,
           "BitwiseOr": np.bitwise_or, "LShift": np.left_shift, "RShift": np.right_shift}
_CALLS = {"tirx.bitwise_xor": np.bitwise_xor, "tirx.bitwise_and": np.bitwise_and, "tirx.bitwise_or": np.bitwise_or,
          "tirx.shift_left": np.left_shift, "tirx.shift_right": np.right_shift}
_LOADS = ("BufferLoad", "TensorLoad")  # what TVM's Python names a buffer load, by version


def bank_wavefronts(addresses, width: int, active=None, phase_lanes: int | None = None) -> tuple[int, int]:
    """(wavefronts, conflict-free wavefronts) of warp-level accesses: `addresses` [instructions, 32] the byte each
    lane starts at, `width` the bytes each lane accesses from there, `active` which lanes take part."""
    addresses = np.asarray(addresses, np.int64).reshape(-1, WARP)
    active = np.ones(addresses.shape, bool) if active is None else np.asarray(active, bool).reshape(addresses.shape)
    phase = phase_lanes or max(1, min(WARP, WARP * BANK_BYTES // width))
    rows, lanes = np.nonzero(active)
    if rows.size == 0:
        return 0, 0
    start = addresses[rows, lanes]
    first, last = start // BANK_BYTES, (start + width - 1) // BANK_BYTES
    span = np.arange(width // BANK_BYTES + 2)
    words = first[:, None] + span
    touched = words <= last[:, None]
    phases = np.broadcast_to((rows * (WARP // phase) + lanes // phase)[:, None], words.shape)
    pairs = np.unique(np.stack([phases[touched], words[touched]], 1), axis=0)  # distinct words of each phase
    per_bank, counts = np.unique(np.stack([pairs[:, 0], pairs[:, 1] % BANKS], 1), axis=0, return_counts=True)
    used = np.unique(per_bank[:, 0])
    worst = np.zeros(used.size, np.int64)
    np.maximum.at(worst, np.searchsorted(used, per_bank[:, 0]), counts)
    return int(worst.sum()), int(used.size)


@dataclasses.dataclass
class Site:
    """One shared-memory instruction of the kernel, over every time one thread block's warps issue it."""

    kind: str  # "store", "load", "cp.async" or "ldmatrix"
    buffer: str  # TVM's name for the buffer (after merging shared allocations, a view may carry another's name)
    dtype: str  # the view's element type: float32 for the accumulator tile, float16 for the operands
    lane_bytes: int
    instructions: int = 0  # warp-level instructions issued
    wavefronts: int = 0
    ideal: int = 0  # the wavefronts without a conflict: one per phase with an active lane

    @property
    def conflicts(self) -> int:
        return self.wavefronts - self.ideal

    def __str__(self) -> str:
        return (f"{self.kind} {self.buffer} {self.dtype} ({self.lane_bytes} B/lane): {self.instructions} instructions, "
                f"{self.wavefronts} wavefronts for {self.ideal}")


@dataclasses.dataclass
class Simulation:
    sites: list  # [Site] in the kernel's order
    fragments: list  # per ldmatrix instruction issued: [threads, values] tags of the elements each thread received
    shared_bytes: int

    def site(self, kind: str, buffer_prefix: str, dtype: str = "float16") -> Site:
        (found,) = [s for s in self.sites
                    if s.kind == kind and s.buffer.startswith(buffer_prefix) and s.dtype == dtype]
        return found


def lower(func, backend) -> list:
    """The device kernels (PrimFuncs) of a scheduled PrimFunc, lowered as `backend.compile` lowers it."""
    return backend.lower_device_kernels(func)


def simulate(kernel, block: dict | None = None) -> Simulation:
    """Run one thread block of a lowered device kernel (`block`: blockIdx tag -> index, 0 where not given)."""
    run = _Block(kernel, block or {})
    run.stmt(kernel.body)
    return Simulation(list(run.sites.values()), run.fragments, run.memory.size * 2)


def shared_allocation(kernel) -> int:
    """Bytes of shared memory a lowered kernel allocates."""
    sizes = []

    def note(stmt):
        if type(stmt).__name__ == "AllocBuffer" and stmt.buffer.scope().startswith("shared"):
            sizes.append(int(np.prod([int(d) for d in stmt.buffer.shape])) * _bytes(stmt.buffer.dtype))

    _visit_stmts(kernel.body, note)
    return sum(sizes)


class _Block:
    def __init__(self, kernel, block):
        self.extents = {}
        _visit_stmts(kernel.body, self._note_launch)
        x, y, z = (self.extents.get(f"threadIdx.{a}", 1) for a in "xyz")
        self.threads = x * y * z
        if self.threads % WARP:
            raise NotImplementedError(f"{self.threads} threads: not whole warps")
        tid = np.arange(self.threads, dtype=np.int64)[:, None]  # [threads, 1]: vector lanes broadcast along axis 1
        self.thread_index = {"threadIdx.x": tid % x, "threadIdx.y": tid // x % y, "threadIdx.z": tid // (x * y)}
        self.block = block
        self.env, self.mask = {}, np.ones(self.threads, bool)
        self.bases = {}  # shared buffer name -> its first byte
        self.pointers = {}  # str(data) of a buffer -> (name, scope): what intrinsics' pointer arguments point into
        self.globals = {}  # str(data) of a global buffer -> its number in the tags
        self.shared_end = 0
        self.memory = np.zeros(0, np.int64)
        self.sites, self.fragments = {}, []

    def _note_launch(self, stmt):
        if type(stmt).__name__ == "AttrStmt" and stmt.attr_key == "thread_extent":
            self.extents[stmt.node.thread_tag] = int(stmt.value)

    # -- statements ----------------------------------------------------------------------------------------------

    def stmt(self, s):
        kind = type(s).__name__
        if kind == "SeqStmt":
            for part in s.seq:
                self.stmt(part)
        elif kind == "AttrStmt":
            if s.attr_key == "thread_extent":
                tag = s.node.thread_tag
                value = self.thread_index[tag] if tag.startswith("threadIdx") else self.block.get(tag, 0)
                self.env[s.node.var] = value
            self.stmt(s.body)
        elif kind == "For":
            if int(s.kind) == 2:  # ForKind.VECTORIZED
                raise NotImplementedError("a vectorized loop left after lowering")
            start, extent = self.expr(s.min), self.expr(s.extent)
            for i in range(int(start), int(start) + int(extent)):
                self.env[s.loop_var] = i
                self.stmt(s.body)
        elif kind == "IfThenElse":
            cond = np.broadcast_to(self.expr(s.condition), (self.threads, 1))[:, 0].astype(bool)
            self.masked(cond, s.then_case)
            if s.else_case is not None:
                self.masked(~cond, s.else_case)
        elif kind in ("LetStmt", "Bind"):
            self.env[s.var] = self.expr(s.value)
            if getattr(s, "body", None) is not None:
                self.stmt(s.body)
        elif kind in ("DeclBuffer", "AllocBuffer"):
            self.declare(s.buffer)
            if getattr(s, "body", None) is not None:
                self.stmt(s.body)
        elif kind == "BufferStore":
            self.store(s)
        elif kind == "Evaluate":
            self.call(s.value)
        elif getattr(s, "body", None) is not None:
            self.stmt(s.body)
        else:
            raise NotImplementedError(f"statement {kind}")

    def masked(self, cond, body):
        saved = self.mask
        self.mask = saved & cond
        if self.mask.any():
            self.stmt(body)
        self.mask = saved

    def declare(self, buffer):
        scope = buffer.scope()
        self.pointers.setdefault(str(buffer.data), (buffer.name, scope))
        if scope.startswith("shared"):
            size = int(np.prod([int(d) for d in buffer.shape])) * _bytes(buffer.dtype)
            # dynamic shared memory is one array every shared.dyn buffer starts at; static ones follow each other
            base = 0 if scope == "shared.dyn" else -(-self.shared_end // 128) * 128
            self.bases.setdefault(buffer.name, base)
            self.shared_end = max(self.shared_end, base + size)
            if self.memory.size * 2 < self.shared_end:
                grown = np.full(-(-self.shared_end // 2), UNWRITTEN, np.int64)
                grown[: self.memory.size] = self.memory
                self.memory = grown
        elif scope == "global":
            self.globals.setdefault(str(buffer.data), len(self.globals))

    def shared(self, buffer):
        """(name, byte base, element bytes) of a shared buffer, or None for any other."""
        if not buffer.scope().startswith("shared"):
            return None
        return buffer.name, self.bases.get(buffer.name, 0), _bytes(buffer.dtype)

    def pointee(self, data):
        """(name, byte base) of the shared buffer a pointer argument points into."""
        name, scope = self.pointers[str(data)]
        return name, self.bases.get(name, 0)

    def store(self, s):
        self.loads(s.value)
        shared = self.shared(s.buffer)
        if shared is None:
            return
        name, base, elem = shared
        index = self.lanes(self.expr(s.indices[-1]), _dtype(s.value).lanes)
        self.access("store", name, str(s.buffer.dtype), base + index * elem, elem)
        self.write(base + index * elem, elem, self.tags(s.value, index.shape[1]))

    def loads(self, expr):
        """Record the shared-memory loads inside an expression."""
        found = []
        _visit_exprs(expr, lambda e: found.append(e) if type(e).__name__ in _LOADS else None)
        for load in found:
            shared = self.shared(load.source)
            if shared is not None:
                name, base, elem = shared
                index = self.lanes(self.expr(load.indices[-1]), _dtype(load).lanes)
                self.access("load", name, str(load.source.dtype), base + index * elem, elem)

    def call(self, call):
        op = _op(call)
        if op.endswith("ldmatrix"):
            self.ldmatrix(call)
        elif op.endswith("cp_async_raw"):
            self.cp_async(call)
        elif op:  # anything else must not take a shared-memory pointer (an mma_store would: not simulated)
            shared = []
            _visit_exprs(call, lambda e: shared.append(e) if self.pointers.get(str(e), ("", ""))[1].startswith(
                "shared") else None)
            if shared:
                raise NotImplementedError(f"{op} takes a shared-memory pointer: not simulated")

    def cp_async(self, call):
        dst, dst_offset, src, src_offset, size = call.args[:5]
        name, base = self.pointee(dst)
        elem = _bytes(_dtype(call))  # both offsets count elements of the call's type
        count = int(size) // elem
        start = base + self.lanes(self.expr(dst_offset), 1) * elem
        self.access("cp.async", name, str(_dtype(call)), start, int(size))
        number = self.globals[str(src)]
        tags = (number << _GLOBAL_SHIFT) + self.lanes(self.expr(src_offset), 1) + np.arange(count)
        if len(call.args) == 6:  # the predicate: a false one fills zeros
            keep = np.broadcast_to(self.expr(call.args[5]), (self.threads, 1)).astype(bool)
            tags = np.where(keep, tags, CONSTANT)
        self.write(start + np.arange(count) * elem, elem, tags)

    def ldmatrix(self, call):
        trans, matrices, ptr, offset = bool(call.args[0]), int(call.args[1]), call.args[5], call.args[6]
        name, base = self.pointee(ptr.args[1])
        elem = _bytes(_dtype(ptr.args[0]))
        rows_start = base + (self.lanes(self.expr(ptr.args[2]), 1) + self.lanes(self.expr(offset), 1)) * elem
        lane = np.arange(self.threads) % WARP
        giving = lane < 8 * matrices  # lanes 8i..8i+7 give matrix i's rows
        self.access("ldmatrix", name, str(_dtype(ptr.args[0])), rows_start, 16, giving)
        rows = self.memory[(rows_start[:, :1] + np.arange(8) * elem) // 2].reshape(-1, WARP, 8)
        # each thread receives two elements of each matrix: row lane // 4, columns 2 * (lane % 4) + 0, 1 (the
        # transposed matrix with .trans)
        quad, pair = (lane[:WARP] // 4)[:, None], (2 * (lane[:WARP] % 4))[:, None] + np.arange(2)
        got = []
        for m in range(matrices):
            if trans:
                got.append(rows[:, 8 * m + pair, quad])
            else:
                got.append(rows[:, 8 * m + quad, pair])
        self.fragments.append(np.concatenate(got, axis=2).reshape(self.threads, -1))

    # -- shared memory -------------------------------------------------------------------------------------------

    def access(self, kind, buffer, dtype, addresses, elem, active=None):
        """One instruction at `addresses` [threads, lanes] (a contiguous vector per thread, or per-lane scalars)."""
        active = self.mask if active is None else self.mask & active
        if addresses.shape[1] > 1 and not np.all(np.diff(addresses, axis=1) == elem):
            for column in range(addresses.shape[1]):  # a strided vector: one instruction per element
                self.access(kind, buffer, dtype, addresses[:, column:column + 1], elem, active)
            return
        width = elem * addresses.shape[1]
        site = self.sites.setdefault((kind, buffer, dtype, width), Site(kind, buffer, dtype, width))
        waves, ideal = bank_wavefronts(addresses[:, 0].reshape(-1, WARP), width, active.reshape(-1, WARP))
        site.instructions += int(active.reshape(-1, WARP).any(axis=1).sum())
        site.wavefronts += waves
        site.ideal += ideal

    def write(self, addresses, elem, tags):
        """Shared memory's tags at `addresses` [threads, lanes] become `tags` (4-byte elements: constants)."""
        addresses = np.broadcast_to(addresses, np.broadcast_shapes(addresses.shape, np.shape(tags)))
        tags = np.broadcast_to(tags, addresses.shape)
        rows = self.mask
        if elem == 2:
            self.memory[addresses[rows] // 2] = tags[rows]
        else:
            for half in range(elem // 2):
                self.memory[addresses[rows] // 2 + half] = CONSTANT

    def tags(self, value, lanes):
        """[threads, lanes] tags of what a stored value is made of: the global elements it loads."""
        kind = type(value).__name__
        if kind in _LOADS:
            index = self.lanes(self.expr(value.indices[-1]), lanes)
            shared = self.shared(value.source)
            if shared is not None:
                return self.memory[(shared[1] + index * shared[2]) // 2]
            number = self.globals.get(str(value.source.data))
            return (number << _GLOBAL_SHIFT) + index if number is not None else np.full(index.shape, CONSTANT)
        if kind == "Cast":
            return self.tags(value.value, lanes)
        if _op(value) == "tirx.if_then_else":
            cond = self.expr(value.args[0])
            return np.where(cond, self.tags(value.args[1], lanes), self.tags(value.args[2], lanes))
        loads = []
        _visit_exprs(value, lambda e: loads.append(e) if type(e).__name__ in _LOADS else None)
        if not loads:
            return np.full((self.threads, lanes), CONSTANT, np.int64)
        combined = self.tags(loads[0], lanes)
        for load in loads[1:]:  # an expression of several elements: a tag that depends on each
            combined = combined * 1_000_003 + self.tags(load, lanes)
        return combined

    # -- expressions ---------------------------------------------------------------------------------------------

    def lanes(self, value, lanes):
        """`value` as [threads, lanes] int64."""
        return np.broadcast_to(np.asarray(value, np.int64), (self.threads, lanes)).copy()

    def expr(self, e):
        kind = type(e).__name__
        if kind == "IntImm":
            return int(e.value)
        if kind == "FloatImm":
            return float(e.value)
        if kind == "Var":
            return self.env[e]
        if kind in _BINARY:
            return _BINARY[kind](self.expr(e.a), self.expr(e.b))
        if kind == "Cast":
            return self.expr(e.value)
        if kind == "Not":
            return np.logical_not(self.expr(e.a))
        if kind == "Select":
            return np.where(self.expr(e.condition), self.expr(e.true_value), self.expr(e.false_value))
        if kind == "Ramp":
            return np.asarray(self.expr(e.base)) + np.asarray(self.expr(e.stride)) * np.arange(int(e.lanes))
        if kind == "Broadcast":
            return np.asarray(self.expr(e.value)) + np.zeros(int(e.lanes), np.int64)
        if kind == "Let":
            self.env[e.var] = self.expr(e.value)
            return self.expr(e.body)
        op = _op(e)
        if op in _CALLS:
            return _CALLS[op](self.expr(e.args[0]), self.expr(e.args[1]))
        if op == "tirx.if_then_else":
            return np.where(self.expr(e.args[0]), self.expr(e.args[1]), self.expr(e.args[2]))
        if op == "tirx.likely":
            return self.expr(e.args[0])
        raise NotImplementedError(f"index expression {kind} {op}")


def _dtype(e):
    return e.ty.dtype


def _bytes(dtype) -> int:
    return dtype.bits * dtype.lanes // 8


def _op(e) -> str:
    return e.op.name if type(e).__name__ == "Call" and hasattr(e.op, "name") else ""


def _visit_stmts(stmt, fn):
    fn(stmt)
    kind = type(stmt).__name__
    if kind == "SeqStmt":
        for part in stmt.seq:
            _visit_stmts(part, fn)
    elif kind == "IfThenElse":
        _visit_stmts(stmt.then_case, fn)
        if stmt.else_case is not None:
            _visit_stmts(stmt.else_case, fn)
    elif getattr(stmt, "body", None) is not None:
        _visit_stmts(stmt.body, fn)


def _visit_exprs(expr, fn):
    """fn(e) for `expr` and every expression inside it."""
    import tvm_ffi

    def each(value, visitor):
        fn(value)
        visitor.default_visit(value)

    tvm_ffi.structural_visit(expr, each)
