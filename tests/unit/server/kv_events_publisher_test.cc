// KvEventsPublisher over loopback TCP: sequence numbers, the topic, the PUB
// framing and the replay protocol (answered from the buffer, so the checks
// do not depend on when a subscriber joined).
#include "server/kv_events/kv_events_publisher.h"

#include <chrono>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "zmq.hpp"
#include "zmq_addon.hpp"

namespace kvserve::server {
namespace {

scheduler::KvEventBatch Removed(uint64_t id) {
  scheduler::KvEventBatch b;
  b.timestamp_s = static_cast<double>(id);
  b.events.push_back(scheduler::BlockRemovedEvent{.block_ids = {id}});
  return b;
}

std::string Seq(uint64_t x) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, x >>= 8) s[i] = static_cast<char>(x & 0xff);
  return s;
}

void WaitPublished(const KvEventsPublisher& p, int64_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (p.counters().published < n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(p.counters().published, n);
}

std::vector<std::string> Receive(zmq::socket_t& s) {
  std::vector<zmq::message_t> parts;
  EXPECT_TRUE(zmq::poll(std::vector<zmq::pollitem_t>{{s.handle(), 0, ZMQ_POLLIN, 0}},
                        std::chrono::seconds(10)) > 0);
  zmq::recv_multipart(s, std::back_inserter(parts));
  std::vector<std::string> out;
  for (auto& m : parts) out.push_back(m.to_string());
  return out;
}

TEST(KvEventsPublisherTest, PublishesInOrderAndReplaysFromASequenceNumber) {
  const KvEventFormat format{.encoding = KvEventEncoding::kMap, .medium = "CPU"};
  auto started = KvEventsPublisher::Start({.endpoint = "tcp://127.0.0.1:0",
                                           .replay_endpoint = "tcp://127.0.0.1:0",
                                           .format = format,
                                           .replay_buffer_batches = 2});
  ASSERT_TRUE(started.ok()) << started.status();
  KvEventsPublisher& p = **started;
  ASSERT_NE(p.endpoint(), "tcp://127.0.0.1:0");  // the port it picked
  p.SetTopic("kv@pod@model");

  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.connect(p.endpoint());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // joins before the first send

  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(p.Enqueue(Removed(i)));
  WaitPublished(p, 3);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(Receive(sub), (std::vector<std::string>{"kv@pod@model", Seq(i),
                                                      EncodeKvEventBatch(Removed(i), format)}));
  }

  // The buffer holds the last 2 batches: a replay from 0 returns 1 and 2.
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.connect(p.replay_endpoint());
  const std::string start = Seq(0);
  std::array<zmq::const_buffer, 2> request{zmq::const_buffer(), zmq::buffer(start)};
  zmq::send_multipart(dealer, request);
  for (uint64_t i = 1; i < 3; ++i) {
    EXPECT_EQ(Receive(dealer), (std::vector<std::string>{"", "kv@pod@model", Seq(i),
                                                         EncodeKvEventBatch(Removed(i), format)}));
  }
  EXPECT_EQ(Receive(dealer), (std::vector<std::string>{"", "", std::string(8, '\xff'), ""}));
  EXPECT_EQ(p.counters().dropped, 0);
  p.Stop();
  EXPECT_FALSE(p.Enqueue(Removed(9)));  // stopped: dropped, counted
  EXPECT_EQ(p.counters().dropped, 1);
}

TEST(KvEventsPublisherTest, AnEndpointItCannotBindIsAnError) {
  auto first = KvEventsPublisher::Start({.endpoint = "tcp://127.0.0.1:0"});
  ASSERT_TRUE(first.ok());
  auto second = KvEventsPublisher::Start({.endpoint = (*first)->endpoint()});
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("--kv_events_endpoint"), std::string::npos);
}

}  // namespace
}  // namespace kvserve::server
