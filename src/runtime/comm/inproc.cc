// The inproc backend: ranks are threads of one process; mailboxes keyed by (from, to, tag).
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "../allocator.h"
#include "autopar/runtime/communicator.h"

namespace autopar::runtime {
namespace {

// How long a receive polls for its message before it sleeps on the condition variable, when
// every rank can have a core of its own. Waking a sleeping thread costs tens of microseconds
// on virtual machines (the core is halted), more than a collective of small tensors takes;
// the peers of a plan run at the same time, so their messages mostly arrive within this
// window. With more ranks than cores, polling would take time from the ranks that work.
constexpr std::chrono::microseconds kPoll{200};

struct Mailboxes {
  std::mutex mutex;
  std::condition_variable arrived;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::deque<Tensor>> queues;  // (from, to, tag)
  std::atomic<uint64_t> sent{0};  // messages posted so far, polled without the lock
};

class InprocCommunicator : public Communicator {
 public:
  InprocCommunicator(int64_t rank, int64_t size, std::shared_ptr<Mailboxes> boxes,
                     std::chrono::milliseconds timeout)
      : rank_(rank),
        size_(size),
        boxes_(std::move(boxes)),
        timeout_(timeout),
        poll_(size <= static_cast<int64_t>(std::thread::hardware_concurrency())) {}

  int64_t rank() const override { return rank_; }
  int64_t size() const override { return size_; }

  Status send(int64_t peer, int64_t tag, const Tensor& tensor) override {
    if (peer < 0 || peer >= size_) return error("send to rank {} of a world of {}", peer, size_);
    Tensor copy = tensor;  // outside the lock
    {
      std::lock_guard<std::mutex> lock(boxes_->mutex);
      boxes_->queues[{rank_, peer, tag}].push_back(std::move(copy));
      boxes_->sent.fetch_add(1, std::memory_order_release);
    }
    boxes_->arrived.notify_all();
    return Status::ok();
  }

  StatusOr<Tensor> recv(int64_t peer, int64_t tag) override {
    if (peer < 0 || peer >= size_)
      return error("receive from rank {} of a world of {}", peer, size_);
    const std::tuple<int64_t, int64_t, int64_t> key{peer, rank_, tag};
    std::unique_lock<std::mutex> lock(boxes_->mutex);
    auto has_message = [&] {
      auto it = boxes_->queues.find(key);
      return it != boxes_->queues.end() && !it->second.empty();
    };
    if (!has_message() && poll_) {
      // Poll: look again whenever another message has been posted.
      const auto poll_end = std::chrono::steady_clock::now() + kPoll;
      uint64_t seen = boxes_->sent.load(std::memory_order_acquire);
      bool found = false;
      lock.unlock();
      while (!found && std::chrono::steady_clock::now() < poll_end) {
        std::this_thread::yield();
        const uint64_t now = boxes_->sent.load(std::memory_order_acquire);
        if (now == seen) continue;
        seen = now;
        lock.lock();
        found = has_message();
        if (!found) lock.unlock();
      }
      if (!found) lock.lock();
    }
    if (!boxes_->arrived.wait_for(lock, timeout_, has_message)) {
      return error("rank {} waited {} ms for tag {} from rank {}: the plan deadlocks", rank_,
                   timeout_.count(), tag, peer);
    }
    // Each collective call has a tag of its own: a drained queue is dropped, so the mailboxes
    // hold only messages in flight.
    auto it = boxes_->queues.find(key);
    Tensor t = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) boxes_->queues.erase(it);
    return t;
  }

 private:
  int64_t rank_;
  int64_t size_;
  std::shared_ptr<Mailboxes> boxes_;
  std::chrono::milliseconds timeout_;
  bool poll_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> create_inproc_world(int64_t size,
                                                               std::chrono::milliseconds timeout) {
  keep_freed_memory();
  auto boxes = std::make_shared<Mailboxes>();
  std::vector<std::unique_ptr<Communicator>> world;
  for (int64_t r = 0; r < size; ++r)
    world.push_back(std::make_unique<InprocCommunicator>(r, size, boxes, timeout));
  return world;
}

}  // namespace autopar::runtime
