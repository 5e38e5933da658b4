// How the runtime has the C library keep the memory of freed tensors for reuse.
#pragma once

namespace autopar::runtime {

// glibc gives large blocks back to the kernel as they are freed (blocks from 128 KiB up are
// mapped and unmapped one by one, and a heap's free top is trimmed), so a tensor allocated
// where an equal one was just freed touches fresh pages and takes a page fault on each.
// Executors and collectives allocate every output and free it at its last use, step after
// step; this keeps blocks of up to 32 MiB and the heaps' free tops in the process instead.
// Process-wide and idempotent; nothing on other C libraries.
void keep_freed_memory();

}  // namespace autopar::runtime
