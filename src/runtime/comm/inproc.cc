// The inproc backend: ranks are threads of one process; mailboxes keyed by (from, to, tag).
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>

#include "autopar/runtime/communicator.h"

namespace autopar::runtime {
namespace {

struct Mailboxes {
  std::mutex mutex;
  std::condition_variable arrived;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::deque<Tensor>> queues;  // (from, to, tag)
};

class InprocCommunicator : public Communicator {
 public:
  InprocCommunicator(int64_t rank, int64_t size, std::shared_ptr<Mailboxes> boxes,
                     std::chrono::milliseconds timeout)
      : rank_(rank), size_(size), boxes_(std::move(boxes)), timeout_(timeout) {}

  int64_t rank() const override { return rank_; }
  int64_t size() const override { return size_; }

  Status send(int64_t peer, int64_t tag, const Tensor& tensor) override {
    if (peer < 0 || peer >= size_) return error("send to rank {} of a world of {}", peer, size_);
    {
      std::lock_guard<std::mutex> lock(boxes_->mutex);
      boxes_->queues[{rank_, peer, tag}].push_back(tensor);
    }
    boxes_->arrived.notify_all();
    return Status::ok();
  }

  StatusOr<Tensor> recv(int64_t peer, int64_t tag) override {
    if (peer < 0 || peer >= size_)
      return error("receive from rank {} of a world of {}", peer, size_);
    std::unique_lock<std::mutex> lock(boxes_->mutex);
    auto& queue = boxes_->queues[{peer, rank_, tag}];
    if (!boxes_->arrived.wait_for(lock, timeout_, [&] { return !queue.empty(); })) {
      return error("rank {} waited {} ms for tag {} from rank {}: the plan deadlocks", rank_,
                   timeout_.count(), tag, peer);
    }
    Tensor t = std::move(queue.front());
    queue.pop_front();
    return t;
  }

 private:
  int64_t rank_;
  int64_t size_;
  std::shared_ptr<Mailboxes> boxes_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> create_inproc_world(int64_t size,
                                                               std::chrono::milliseconds timeout) {
  auto boxes = std::make_shared<Mailboxes>();
  std::vector<std::unique_ptr<Communicator>> world;
  for (int64_t r = 0; r < size; ++r)
    world.push_back(std::make_unique<InprocCommunicator>(r, size, boxes, timeout));
  return world;
}

}  // namespace autopar::runtime
