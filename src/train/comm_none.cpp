// The message layer without MPI (qkv built with QKV_WITH_MPI=OFF or without Open MPI):
// one process, always. Launched by mpirun as one of several ranks, it refuses to run, since
// every rank would train the whole run alone and write the same files.
#include <cstdlib>

#include "comm.h"
#include "qkv/train/distributed.h"

namespace qkv::train::detail {

struct Comm::Impl {};

bool Comm::built_with_mpi() { return false; }

bool Comm::launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* s = std::getenv(v); s && std::atoi(s) > 1) return true;
  return false;
}

std::unique_ptr<Comm> Comm::start(double) {
  if (launched_by_mpirun())
    throw DistributedError("distributed: this qkv was built without MPI, so it cannot be one rank of an mpirun job "
                           "(every rank would train alone and write the same files); rebuild with Open MPI installed "
                           "(libopenmpi-dev) and -DQKV_WITH_MPI=ON",
                           false);
  return nullptr;
}

Comm::~Comm() = default;
std::string Comm::who() const { return "rank 0 of 1"; }
Request Comm::isend(const void*, std::size_t, int, Tag) { throw Error("distributed: no MPI in this build"); }
Request Comm::irecv(void*, std::size_t, int, Tag) { throw Error("distributed: no MPI in this build"); }
bool Comm::test(Request&) { return true; }
void Comm::wait(std::vector<Request>&, const std::string&) {}
void Comm::set_busy(bool) {}
void Comm::finish() {}
void Comm::abort(int code) { std::_Exit(code); }

}  // namespace qkv::train::detail
