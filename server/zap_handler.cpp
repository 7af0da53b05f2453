#include "server/zap_handler.h"

#include <set>
#include <vector>

#include "common/error.h"
#include "server/message.h"

namespace gradsync {
namespace {

constexpr std::size_t kMaxLoggedKeys = 64;  // a client retries every ~100 ms: log each key once

std::string frame_text(const zmq::message_t& frame) { return frame.to_string(); }

}  // namespace

ZapHandler::ZapHandler(zmq::context_t& context, const std::string& allowed_public_z85,
                       std::function<void(const std::string&)> log)
    : socket_(context, zmq::socket_type::rep), log_(std::move(log)) {
  std::string binary(32, '\0');
  if (allowed_public_z85.size() != 40 ||
      zmq_z85_decode(reinterpret_cast<std::uint8_t*>(binary.data()), allowed_public_z85.c_str()) ==
          nullptr) {
    throw Error("CURVE: the public key is not 40 Z85 characters");
  }
  allowed_ = binary;
  socket_.set(zmq::sockopt::linger, 0);
  // libzmq looks for exactly this address in the socket's own context.
  socket_.bind("inproc://zeromq.zap.01");
  thread_ = std::thread([this] { run(); });
}

ZapHandler::~ZapHandler() {
  stop_ = true;
  thread_.join();
}

void ZapHandler::run() {
  std::set<std::string> logged;
  zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
  while (!stop_) {
    try {
      // Polled with a short timeout so the destructor's stop flag is seen promptly.
      if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
      std::vector<zmq::message_t> request;
      bool more = true;
      while (more) {
        zmq::message_t frame;
        (void)socket_.recv(frame, zmq::recv_flags::none);
        more = frame.more();
        request.push_back(std::move(frame));
      }
      // Request (RFC 27): version, request id, domain, address, routing id, mechanism, then
      // the mechanism's credentials: for CURVE, the client's 32-byte public key.
      const bool well_formed = request.size() >= 6 && frame_text(request[0]) == "1.0";
      const std::string mechanism = well_formed ? frame_text(request[5]) : "";
      const std::string address = well_formed ? frame_text(request[3]) : "?";
      const std::string key = request.size() >= 7 ? frame_text(request[6]) : "";
      const bool ok = well_formed && mechanism == "CURVE" && key == allowed_;
      if (!ok && logged.size() < kMaxLoggedKeys && logged.insert(address + key).second && log_) {
        log_("refused a " + (mechanism.empty() ? std::string("malformed") : mechanism) +
             " client at " + address + ": its public key " +
             (key.size() == 32 ? peer_hex(key).substr(0, 16) + "... " : std::string()) +
             "is not the shared key (further attempts with this key are not logged)");
      }
      // Reply: version, request id, status code, status text, user id, metadata.
      const std::string id = request.size() >= 2 ? frame_text(request[1]) : "";
      const auto more_flag = zmq::send_flags::sndmore;
      socket_.send(zmq::buffer(std::string("1.0")), more_flag);
      socket_.send(zmq::buffer(id), more_flag);
      socket_.send(zmq::buffer(std::string(ok ? "200" : "400")), more_flag);
      socket_.send(zmq::buffer(std::string(ok ? "OK" : "unknown key")), more_flag);
      socket_.send(zmq::buffer(std::string()), more_flag);
      socket_.send(zmq::buffer(std::string()), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;  // the context is closing
      if (log_) log_(std::string("ZAP handler: ") + e.what());
    }
  }
}

}  // namespace gradsync
