// The MPI backend: one rank per process (mpirun -np N); a tensor travels as a header message
// (dtype and dims) followed by its bytes.
#include <mpi.h>

#include <memory>
#include <mutex>

#include "autopar/runtime/communicator.h"

namespace autopar::runtime {
namespace {

// MPI tags are ints with an implementation bound (at least 32767): autopar's 64-bit tags are
// folded into it; pairs of ranks still see their messages in the order sent.
constexpr int64_t kMaxWireRank = 16;

int mpi_tag(int64_t tag, int upper_bound) { return static_cast<int>(tag % (upper_bound - 1)) + 1; }

Status check(int code, std::string_view what) {
  if (code == MPI_SUCCESS) return Status::ok();
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, message, &length);
  return error("MPI {}: {}", what, std::string(message, length));
}

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(int rank, int size, int tag_bound)
      : rank_(rank), size_(size), tag_bound_(tag_bound) {}
  ~MpiCommunicator() override {
    complete_sends(true);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }

  int64_t rank() const override { return rank_; }
  int64_t size() const override { return size_; }

  Status send(int64_t peer, int64_t tag, const Tensor& tensor) override {
    if (peer < 0 || peer >= size_) return error("send to rank {} of a world of {}", peer, size_);
    if (tensor.rank() > kMaxWireRank)
      return error("a tensor of rank {} cannot be sent (at most {})", tensor.rank(), kMaxWireRank);
    std::vector<int64_t> header = {dtype_to_onnx(tensor.dtype()), tensor.rank()};
    header.insert(header.end(), tensor.dims().begin(), tensor.dims().end());
    const int t = mpi_tag(tag, tag_bound_);
    // Sends never wait for the receiver (a pipeline schedule relies on it, and so does the
    // collectives' send-all-then-receive exchange): the message is copied and posted
    // nonblocking; finished sends are reaped on later calls.
    complete_sends(false);
    auto pending = std::make_unique<PendingSend>();
    pending->header = std::move(header);
    pending->tensor = tensor;
    RETURN_IF_ERROR(check(
        MPI_Isend(pending->header.data(), static_cast<int>(pending->header.size()), MPI_INT64_T,
                  static_cast<int>(peer), t, MPI_COMM_WORLD, &pending->requests[0]),
        "send"));
    RETURN_IF_ERROR(check(
        MPI_Isend(pending->tensor.bytes().data(), static_cast<int>(pending->tensor.num_bytes()),
                  MPI_BYTE, static_cast<int>(peer), t, MPI_COMM_WORLD, &pending->requests[1]),
        "send"));
    pending_.push_back(std::move(pending));
    return Status::ok();
  }

  StatusOr<Tensor> recv(int64_t peer, int64_t tag) override {
    if (peer < 0 || peer >= size_)
      return error("receive from rank {} of a world of {}", peer, size_);
    const int t = mpi_tag(tag, tag_bound_);
    std::vector<int64_t> header(2 + kMaxWireRank);
    MPI_Status status;
    RETURN_IF_ERROR(check(MPI_Recv(header.data(), static_cast<int>(header.size()), MPI_INT64_T,
                                   static_cast<int>(peer), t, MPI_COMM_WORLD, &status),
                          "receive"));
    auto dtype = dtype_from_onnx(static_cast<int32_t>(header[0]));
    if (!dtype) return error("rank {} sent an unknown element type {}", peer, header[0]);
    std::vector<int64_t> dims(header.begin() + 2, header.begin() + 2 + header[1]);
    Tensor out(*dtype, dims);
    RETURN_IF_ERROR(check(MPI_Recv(out.mutable_bytes().data(), static_cast<int>(out.num_bytes()),
                                   MPI_BYTE, static_cast<int>(peer), t, MPI_COMM_WORLD, &status),
                          "receive"));
    return out;
  }

 private:
  struct PendingSend {
    std::vector<int64_t> header;
    Tensor tensor;
    MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  };

  // Frees the buffers of finished sends; with `wait`, waits for all of them first.
  void complete_sends(bool wait) {
    std::vector<std::unique_ptr<PendingSend>> still;
    for (auto& p : pending_) {
      int done = 0;
      if (wait) {
        MPI_Waitall(2, p->requests, MPI_STATUSES_IGNORE);
        done = 1;
      } else {
        MPI_Testall(2, p->requests, &done, MPI_STATUSES_IGNORE);
      }
      if (!done) still.push_back(std::move(p));
    }
    pending_ = std::move(still);
  }

  int rank_;
  int size_;
  int tag_bound_;
  std::vector<std::unique_ptr<PendingSend>> pending_;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> create_mpi_communicator(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    RETURN_IF_ERROR(check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "init"));
  }
  int rank = 0, size = 0, flag = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int* bound = nullptr;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &bound, &flag);
  return std::unique_ptr<Communicator>(
      new MpiCommunicator(rank, size, flag && bound ? *bound : 32767));
}

}  // namespace autopar::runtime
