#include "tests/integration/daemon_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "tools/loadgen/metrics_scrape.h"

namespace kvserve::testing {
namespace {

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "DaemonProcess: %s\n", why.c_str());
  std::abort();
}

std::string ReadLine(int fd) {
  std::string line;
  char c = 0;
  while (read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

std::string Field(const std::string& line, const std::string& key) {
  const size_t at = line.find(key + "=");
  if (at == std::string::npos) return "";
  const size_t start = at + key.size() + 1;
  return line.substr(start, line.find(' ', start) - start);
}

}  // namespace

DaemonProcess::DaemonProcess(const std::vector<std::string>& extra_flags) {
  char path_template[] = "/tmp/kvserve_daemon_stderr_XXXXXX";
  const int err_fd = mkstemp(path_template);
  if (err_fd < 0) Die("mkstemp failed");
  stderr_path_ = path_template;
  int out_pipe[2];
  if (pipe(out_pipe) != 0) Die("pipe failed");

  std::vector<std::string> args = {KVSERVE_DAEMON_PATH, "--host=127.0.0.1", "--port=0",
                                   "--metrics_host=127.0.0.1", "--metrics_port=0"};
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  pid_ = fork();
  if (pid_ < 0) Die("fork failed");
  if (pid_ == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    close(out_pipe[0]);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_fd);
  // The ready line is the only stdout line; the pipe is closed after it so
  // the daemon never blocks on a full pipe (it writes nothing else there).
  const std::string line = ReadLine(out_pipe[0]);
  close(out_pipe[0]);
  grpc_address_ = Field(line, "grpc");
  metrics_address_ = Field(line, "metrics");
  if (line.rfind("kvserve ready", 0) != 0 || grpc_address_.empty()) {
    Die("no ready line; stderr:\n" + StderrLog());
  }
}

DaemonProcess::~DaemonProcess() { Stop(); }

void DaemonProcess::Signal(int sig) const {
  if (pid_ > 0 && !exit_status_) kill(pid_, sig);
}

int DaemonProcess::Stop() {
  if (exit_status_) return *exit_status_;
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  // A safety net, not a speed assertion: a daemon that hangs must not hang
  // the test run.
  for (int i = 0; i < 600; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      return *exit_status_;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  exit_status_ = -1;
  return -1;
}

std::string DaemonProcess::StderrLog() const {
  std::ifstream in(stderr_path_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string ScrapeMetrics(const std::string& address) {
  absl::StatusOr<std::string> body = loadgen::HttpGet("http://" + address + "/metrics");
  return body.ok() ? *body : "";
}

std::map<std::string, double> ParseMetrics(const std::string& text) {
  std::map<std::string, double> samples;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    samples[line.substr(0, space)] = std::strtod(line.c_str() + space + 1, nullptr);
  }
  return samples;
}

}  // namespace kvserve::testing
