// libmemcuda's own code mapped into the process at once.
#pragma once

namespace mcd {

// Maps every page of libmemcuda's executable segments into this process's page tables (once per
// process; later calls return at once). A process's first get otherwise pays a page fault for
// each page of code it runs for the first time, ~40 us before its script is sent and ~45 us
// after its answer on an H100 host, where CUDA's own first open pays none: the pages are in the
// page cache, only not mapped yet. Best effort: nothing is reported.
void MapOwnCodePages();

}  // namespace mcd
