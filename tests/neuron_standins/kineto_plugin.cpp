// STAND-IN Kineto plugin for the TorchNeuron tests. NOT TorchNeuron; built from the docs.
//
// TorchNeuron registers a C++ child profiler with libkineto (libkineto::api()
// .registerProfilerFactory) when torch_neuronx is imported. This file does the same, with the
// real libkineto inside the installed torch, so the tests run the real torch.profiler and the
// real Kineto drive it exactly where TorchNeuron plugs in:
//
// - it advertises CPU_OP, PRIVATEUSE1_RUNTIME and PRIVATEUSE1_DRIVER (as the April-2026
//   TorchNeuron source does) and always returns a session, so Kineto configures and starts it
//   for any capture whose activities include those types; torch's kCpuTypes include both
//   PRIVATEUSE1 types, so that is also a capture with ProfilerActivity.CPU only;
// - start()/stop() call back into Python (the stand-in Neuron runtime writes its session files
//   there), passing Kineto's custom config string (what NeuronConfig serialises to);
// - it learns which op is running through pushCorrelationId/popCorrelationId, which Kineto
//   forwards to every child session, and for each op that launched no nested op it emits, as
//   the Neuron docs describe the framework events of trace.json:
//     * a "privateuse1_runtime" event (operator dispatch) on the op's own thread,
//     * a "privateuse1_driver" event (device execution) whose thread id is the stream id,
//   both linked to the op (linkedActivity), joined by one flow id, and carrying an
//   "nrt_sequence_id". The event names are the stand-in's own: no document gives real ones.
//
// Everything is controlled from tests/neuron_standins/common.py through the extern "C" API at
// the end of this file. When disabled (no stand-in imported) sessions do nothing.

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "GenericTraceActivity.h"
#include "IActivityProfiler.h"
#include "libkineto.h"
#include "output_base.h"

using namespace libkineto;

namespace {

typedef void (*start_cb_t)(const char* custom_config, int runtime, int driver);
typedef void (*stop_cb_t)();

struct Knobs {
  int enabled = 0;
  int device_events = 1;       // emit privateuse1_driver events
  int runtime_events = 1;      // emit privateuse1_runtime events
  int unlinked_driver = 0;     // extra driver events launched outside any op
  int64_t device_ns = 40000;   // duration of each device execution
  int64_t stream = 0;          // stream id of the driver events (their tid)
  int64_t max_events = 0;      // keep only the newest N driver events (0: all)
  int link_ops = 1;            // 0: events carry no link to their op (no External id), only
                               // the flow (ac2g) joining dispatch and execution
};

struct Launch {
  uint64_t corr;
  int64_t start;
  int64_t end;  // when the op returned (popCorrelationId); 0 while it runs
  int32_t tid;
  bool leaf;
};

std::mutex mu;
Knobs knobs;
start_cb_t on_start = nullptr;
stop_cb_t on_stop = nullptr;
std::vector<Launch> launches;
std::vector<size_t> open_ops;
bool recording = false;
int sessions_started = 0;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class StandinSession : public IActivityProfilerSession {
 public:
  StandinSession(bool active, std::string custom, bool runtime, bool driver)
      : active_(active), custom_(std::move(custom)), runtime_(runtime), driver_(driver) {}

  void start() override {
    if (!active_) return;
    {
      std::lock_guard<std::mutex> g(mu);
      launches.clear();
      open_ops.clear();
      recording = true;
      sessions_started++;
    }
    if (on_start) on_start(custom_.c_str(), runtime_ ? 1 : 0, driver_ ? 1 : 0);
  }

  void stop() override {
    if (!active_) return;
    {
      std::lock_guard<std::mutex> g(mu);
      recording = false;
    }
    if (on_stop) on_stop();
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const ITraceActivity* { return nullptr; }, 0, 0);
  }

  void processTrace(ActivityLogger& logger, getLinkedActivityCallback link, int64_t, int64_t) override {
    if (!active_) return;
    std::lock_guard<std::mutex> g(mu);
    std::vector<const Launch*> leaves;
    for (auto& l : launches)
      if (l.leaf) leaves.push_back(&l);
    size_t first = 0;
    if (knobs.max_events > 0 && (int64_t)leaves.size() > knobs.max_events)
      first = leaves.size() - (size_t)knobs.max_events;  // a ring buffer keeps the newest
    int32_t seq = 1;
    int64_t device_free = 0;  // one in-order stream: an execution starts when the last ends
    for (size_t k = first; k < leaves.size(); ++k, ++seq) {
      const Launch& l = *leaves[k];
      const ITraceActivity* src = link((int32_t)l.corr);
      const ITraceActivity* op = knobs.link_ops ? src : nullptr;
      // The dispatch runs inside its op: from the middle of the op's span as torch recorded
      // it (this plugin's own clock reads are a little apart from torch's), else as seen here.
      int64_t op_start = src ? src->timestamp() : l.start;
      int64_t span = src ? src->duration() : (l.end > l.start ? l.end - l.start : 0);
      int64_t at = op_start + span / 2;
      int64_t dispatch_ns = std::min<int64_t>(1500, std::max<int64_t>(span / 4, 1));
      if (runtime_ && knobs.runtime_events) {
        auto rt = make(ActivityType::PRIVATEUSE1_RUNTIME, "neuron_standin_dispatch", at, at + dispatch_ns,
                       seq, l.tid, op);
        rt->flow.id = seq;
        rt->flow.type = kLinkAsyncCpuGpu;
        rt->flow.start = 1;
        logger.handleGenericActivity(*rt);
        keep_.push_back(std::move(rt));
      }
      if (driver_ && knobs.device_events) {
        int64_t begin = std::max(at + 2000, device_free);
        device_free = begin + knobs.device_ns;
        auto dr = make(ActivityType::PRIVATEUSE1_DRIVER, "neuron_standin_neff_exec", begin, device_free, seq,
                       (int32_t)knobs.stream, op);
        dr->flow.id = seq;
        dr->flow.type = kLinkAsyncCpuGpu;
        dr->flow.start = 0;
        logger.handleGenericActivity(*dr);
        keep_.push_back(std::move(dr));
      }
    }
    if (driver_ && knobs.device_events) {
      int64_t t = device_free ? device_free : now_ns();
      for (int i = 0; i < knobs.unlinked_driver; ++i, ++seq) {
        auto dr = make(ActivityType::PRIVATEUSE1_DRIVER, "neuron_standin_unlinked_exec", t, t + knobs.device_ns, seq,
                       (int32_t)(knobs.stream + 1), nullptr);
        t += knobs.device_ns;
        logger.handleGenericActivity(*dr);
        keep_.push_back(std::move(dr));
      }
    }
  }

  std::unique_ptr<DeviceInfo> getDeviceInfo() override { return nullptr; }
  std::vector<ResourceInfo> getResourceInfos() override { return {}; }
  std::unique_ptr<CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

  void pushCorrelationId(uint64_t id) override {
    if (!active_) return;
    std::lock_guard<std::mutex> g(mu);
    if (!recording) return;
    if (!open_ops.empty()) launches[open_ops.back()].leaf = false;
    launches.push_back({id, now_ns(), 0, (int32_t)syscall(SYS_gettid), true});
    open_ops.push_back(launches.size() - 1);
  }

  void popCorrelationId() override {
    if (!active_) return;
    std::lock_guard<std::mutex> g(mu);
    if (!open_ops.empty()) {
      launches[open_ops.back()].end = now_ns();
      open_ops.pop_back();
    }
  }

 private:
  std::unique_ptr<GenericTraceActivity> make(ActivityType type, const char* name, int64_t start, int64_t end,
                                             int32_t seq, int32_t tid, const ITraceActivity* op) {
    auto a = std::make_unique<GenericTraceActivity>(span_, type, name);
    a->startTime = start;
    a->endTime = end;
    a->id = seq;
    a->device = (int32_t)getpid();
    a->resource = tid;
    a->threadId = tid;
    a->linked = op;
    a->addMetadata("nrt_sequence_id", seq);
    return a;
  }

  bool active_;
  std::string custom_;
  bool runtime_;
  bool driver_;
  TraceSpan span_{0, 0, "neuron_standin"};
  std::vector<std::unique_ptr<GenericTraceActivity>> keep_;
};

class StandinProfiler : public IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<ActivityType>& availableActivities() const override { return types_; }

  std::unique_ptr<IActivityProfilerSession> configure(const std::set<ActivityType>& types,
                                                      const Config& config) override {
    bool active;
    {
      std::lock_guard<std::mutex> g(mu);
      active = knobs.enabled != 0;
    }
    return std::make_unique<StandinSession>(active, config.getCustomConfig(),
                                            types.count(ActivityType::PRIVATEUSE1_RUNTIME) > 0,
                                            types.count(ActivityType::PRIVATEUSE1_DRIVER) > 0);
  }

  std::unique_ptr<IActivityProfilerSession> configure(int64_t, int64_t, const std::set<ActivityType>& types,
                                                      const Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_ = "NeuronStandinProfiler";
  std::set<ActivityType> types_{ActivityType::CPU_OP, ActivityType::PRIVATEUSE1_RUNTIME,
                                ActivityType::PRIVATEUSE1_DRIVER};
};

bool registered = false;

}  // namespace

extern "C" {

void standin_register() {
  if (registered) return;
  registered = true;
  libkineto::api().registerProfilerFactory(
      []() -> std::unique_ptr<IActivityProfiler> { return std::make_unique<StandinProfiler>(); });
}

void standin_set_callbacks(start_cb_t start, stop_cb_t stop) {
  on_start = start;
  on_stop = stop;
}

void standin_configure(int enabled, int device_events, int runtime_events, int unlinked_driver,
                       long long device_ns, long long stream, long long max_events, int link_ops) {
  std::lock_guard<std::mutex> g(mu);
  knobs.enabled = enabled;
  knobs.device_events = device_events;
  knobs.runtime_events = runtime_events;
  knobs.unlinked_driver = unlinked_driver;
  knobs.device_ns = device_ns;
  knobs.stream = stream;
  knobs.max_events = max_events;
  knobs.link_ops = link_ops;
}

int standin_sessions_started() { return sessions_started; }
}
