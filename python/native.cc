// gpupool._native: the Python binding of libgpupool's public API (include/gpupool/), for the `gpupool` package
// (python/gpupool/__init__.py): pools, their state, leases. Only the public, ABI-stable API is used, so the module
// links libgpupool.so and nothing of gpupool's internals. Blocking calls release the GIL. Every failure raises
// gpupool.Error, or its subclass for the status code, with libgpupool's message.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpupool/gpupool.h"

namespace py = pybind11;
using namespace gpupool;

namespace {

// A failed Status on its way to Python: translated into the exception class of its code.
struct StatusError {
  StatusCode code;
  std::string message;
};

[[noreturn]] void Raise(const Status& status) { throw StatusError{status.code(), status.message()}; }

template <typename T>
T Unwrap(Result<T> result) {
  if (!result.ok()) Raise(result.status());
  return std::move(result).value();
}

// Python classes per status code: gpupool.Error, and a subclass per code a caller may want to catch.
std::map<StatusCode, PyObject*>& ErrorClasses() {
  static auto* classes = new std::map<StatusCode, PyObject*>();
  return *classes;
}

py::dict ActivityDict(const Activity& a) {
  py::dict d;
  d["memory_used"] = a.memory_used;
  d["utilization"] = a.utilization;
  d["calls_per_s"] = a.calls_per_s;
  d["bytes_to_device_per_s"] = a.bytes_to_device_per_s;
  d["bytes_from_device_per_s"] = a.bytes_from_device_per_s;
  d["temperature_c"] = a.temperature_c;
  d["power_w"] = a.power_w;
  return d;
}

py::dict SliceDict(const Slice& s) {
  py::dict d;
  d["server"] = s.server;
  d["server_name"] = s.server_name;
  d["device"] = s.device;
  d["device_uuid"] = s.device_uuid;
  d["model"] = s.model;
  d["memory_bytes"] = s.memory_bytes;
  d["compute_share"] = s.compute_share;
  return d;
}

// What gp-ls shows, as nested dicts (the package turns them into objects).
py::list StateList(const PoolState& state) {
  py::list servers;
  for (const ServerInfo& s : state.servers) {
    py::dict server;
    server["address"] = s.address;
    server["up"] = s.up;
    server["error"] = s.error;
    server["name"] = s.name;
    server["draining"] = s.draining;
    server["personality"] = s.personality;
    server["summary"] = s.summary;  // From the pool's directory: no slices or leases (lease_count says how many).
    server["lease_count"] = s.summary ? s.lease_count : static_cast<uint32_t>(s.leases.size());
    py::list devices;
    for (const DeviceInfo& dev : s.devices) {
      py::dict d;
      d["index"] = dev.index;
      d["uuid"] = dev.uuid;
      d["model"] = dev.model;
      d["device_class"] = dev.device_class;
      d["emulated"] = dev.emulated;
      d["memory_total"] = dev.memory_total;
      d["memory_allocated"] = dev.memory_allocated;
      d["compute_allocated"] = dev.compute_allocated;
      d["cordoned"] = dev.cordoned;
      d["activity"] = ActivityDict(dev.activity);
      py::list slices;
      for (const SliceInfo& sl : dev.slices) {
        py::dict slice;
        slice["lease_id"] = sl.lease_id;
        slice["memory_bytes"] = sl.memory_bytes;
        slice["compute_share"] = sl.compute_share;
        slice["committed"] = sl.committed;
        slices.append(slice);
      }
      d["slices"] = slices;
      devices.append(d);
    }
    server["devices"] = devices;
    py::list leases;
    for (const LeaseInfo& l : s.leases) {
      py::dict lease;
      lease["id"] = l.id;
      lease["user"] = l.user;
      lease["user_verified"] = l.user_verified;
      lease["host"] = l.host;
      lease["label"] = l.label;
      lease["pid"] = l.pid;
      lease["devices"] = l.devices;
      lease["memory_bytes"] = l.memory_bytes;
      lease["sessions"] = l.sessions;
      lease["expires_in_s"] = l.expires_in_s;
      lease["idle"] = l.idle;
      lease["activity"] = ActivityDict(l.activity);
      leases.append(lease);
    }
    server["leases"] = leases;
    servers.append(server);
  }
  return servers;
}

// The request of Python's arguments (validate_request's and allocate's).
Request MakeRequest(int count, double fraction, std::optional<uint64_t> memory_bytes, const std::string& device_class,
                    std::optional<double> compute_share = std::nullopt) {
  Request request;
  request.count = count;
  request.fraction = fraction;
  request.memory_bytes = memory_bytes;
  request.compute_share = compute_share;
  request.device_class = device_class;
  return request;
}

// Raises InvalidRequest, saying which field is wrong, for a request no pool could take (checked alone).
void CheckRequest(const Request& request) {
  if (Status s = ValidateRequest(request); !s.ok()) Raise(s);
}

// `look` (it waits on agents, or etcd) with the GIL released, its answer as StateList's.
template <typename Look>
py::list StateListOf(Look look) {
  PoolState state;
  {
    py::gil_scoped_release release;
    state = look();
  }
  return StateList(state);
}

PoolOptions Options(const std::optional<std::vector<std::string>>& servers, const std::string& pool_file,
                    const std::string& directory) {
  PoolOptions options;
  if (servers) options.servers = *servers;
  options.pool_file = pool_file;
  options.directory = directory;
  return options;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "libgpupool's public API for the gpupool package; use `import gpupool`.";

  PyObject* base = PyErr_NewExceptionWithDoc("gpupool.Error", "A gpupool call failed; the message says why.",
                                             PyExc_RuntimeError, nullptr);
  m.attr("Error") = py::handle(base);
  ErrorClasses()[StatusCode::kInternal] = base;
  struct Named {
    StatusCode code;
    const char* name;
    const char* doc;
  };
  for (const Named& n : {
           Named{StatusCode::kInvalidArgument, "InvalidRequest", "The request or input is malformed."},
           Named{StatusCode::kUnsatisfiable, "Unsatisfiable", "The pool can never grant this request as it is."},
           Named{StatusCode::kResourceExhausted, "Busy", "The pool could grant it, but not now: pass wait=."},
           Named{StatusCode::kUnavailable, "Unavailable", "No server (or not the needed one) answered."},
           Named{StatusCode::kTimeout, "Timeout", "A deadline passed (connect, call or wait)."},
           Named{StatusCode::kNotFound, "NotFound", "The lease or object does not exist (any more)."},
           Named{StatusCode::kPermissionDenied, "PermissionDenied", "The caller may not do this."},
       }) {
    PyObject* cls = PyErr_NewExceptionWithDoc((std::string("gpupool.") + n.name).c_str(), n.doc, base, nullptr);
    m.attr(n.name) = py::handle(cls);
    ErrorClasses()[n.code] = cls;
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      auto it = ErrorClasses().find(e.code);
      PyObject* cls = it != ErrorClasses().end() ? it->second : ErrorClasses()[StatusCode::kInternal];
      PyErr_SetString(cls, e.message.c_str());
    }
  });

  m.def(
      "validate_request",
      [](int count, double fraction, std::optional<uint64_t> memory_bytes, const std::string& device_class) {
        CheckRequest(MakeRequest(count, fraction, memory_bytes, device_class));
      },
      py::arg("count") = 1, py::arg("fraction") = 1.0, py::arg("memory_bytes") = py::none(),
      py::arg("device_class") = "", "Raises InvalidRequest for a request no pool could take (checked alone).");

  m.def(
      "parse_memory_size", [](const std::string& text) { return Unwrap(ParseMemorySize(text)); },
      "\"16GiB\", \"512MiB\", \"1.5GB\", \"4096\": bytes, as gp-run's -m reads them.");

  py::class_<Lease, std::unique_ptr<Lease>>(m, "Lease", "Slices held until release() (or the object's end).")
      .def_property_readonly("id", &Lease::id)
      .def_property_readonly("valid", &Lease::valid)
      .def_property_readonly("slices",
                             [](const Lease& l) {
                               py::list out;
                               for (const Slice& s : l.slices()) out.append(SliceDict(s));
                               return out;
                             })
      .def("token", &Lease::Token, "The lease for another process (GPUPOOL_LEASE); a credential.")
      .def(
          "check",
          [](Lease& l) {
            Status s;
            {
              py::gil_scoped_release release;
              s = l.CheckNow();
            }
            if (!s.ok()) Raise(s);
          },
          "Renews the lease now; raises why when an agent ended it.")
      .def(
          "release",
          [](Lease& l) {
            Status s;
            {
              py::gil_scoped_release release;
              s = l.Release();
            }
            if (!s.ok()) Raise(s);
          },
          "Releases the slices; idempotent.");

  py::class_<Pool, std::unique_ptr<Pool>>(m, "Pool", "A connection to the pool's agents.")
      .def_static(
          "connect",
          [](std::optional<std::vector<std::string>> servers, const std::string& pool_file,
             const std::string& directory) {
            return std::make_unique<Pool>(Unwrap(Pool::Connect(Options(servers, pool_file, directory))));
          },
          py::arg("servers") = py::none(), py::arg("pool_file") = "", py::arg("directory") = "")
      .def_property_readonly("servers", &Pool::servers)
      .def_property_readonly("has_directory", &Pool::has_directory)
      .def("summary", [](Pool& pool) { return StateListOf([&] { return pool.Summary(); }); },
           "With a directory: what its agents published (one read); else the same as state().")
      .def("state", [](Pool& pool) { return StateListOf([&] { return pool.State(); }); })
      .def(
          "allocate",
          [](Pool& pool, int count, double fraction, std::optional<uint64_t> memory_bytes,
             std::optional<double> compute_share, const std::string& device_class, double wait_s,
             const std::string& label) {
            if (!(wait_s >= 0 && wait_s <= 1e7)) {  // NaN too.
              Raise(Status(StatusCode::kInvalidArgument, "wait must be 0..1e7 s"));
            }
            Request request = MakeRequest(count, fraction, memory_bytes, device_class, compute_share);
            request.wait = std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000));
            request.label = label;
            CheckRequest(request);
            Result<Lease> lease = Status(StatusCode::kInternal, "not allocated");
            {
              py::gil_scoped_release release;
              lease = pool.Allocate(request);
            }
            return std::make_unique<Lease>(Unwrap(std::move(lease)));
          },
          py::arg("count") = 1, py::arg("fraction") = 1.0, py::arg("memory_bytes") = py::none(),
          py::arg("compute_share") = py::none(), py::arg("device_class") = "", py::arg("wait_s") = 0.0,
          py::arg("label") = "");
}
