#include "qkv/optim/optimizer.h"

#include <cmath>

#include "qkv/autograd/autograd.h"
#include "qkv/core/parallel.h"

namespace qkv::optim {

namespace {
NamedParams name_them(const std::vector<Tensor>& ps) {
  NamedParams out;
  for (std::size_t i = 0; i < ps.size(); ++i) out.emplace_back(std::to_string(i), ps[i]);
  return out;
}

template <class T>
bool all_finite(const Tensor& t) {
  Tensor c = t.contiguous();
  const T* p = c.data<T>();
  for (std::int64_t i = 0, n = c.numel(); i < n; ++i)
    if (!std::isfinite(p[i])) return false;
  return true;
}
}  // namespace

Optimizer::Optimizer(NamedParams params, const char* kind) : params_(std::move(params)), kind_(kind) {
  for (auto& [n, p] : params_) {
    if (!p.defined() || !is_floating(p.dtype()))
      throw TypeError(kind_ + ": parameter '" + n + "' must be a defined float tensor");
    if (!p.is_leaf()) throw ValueError(kind_ + ": parameter '" + n + "' is not a leaf tensor");
    // A parameter viewing its file in another layout (GPT-2's Conv1D weights, transposed) gets
    // contiguous storage of its own: the updates run over contiguous memory.
    if (!p.is_contiguous()) p.set_data_(p.detach().contiguous());
  }
}

Optimizer::Optimizer(const std::vector<Tensor>& params, const char* kind) : Optimizer(name_them(params), kind) {}

void Optimizer::set_lr(double lr) {
  if (!(lr >= 0.0) || !std::isfinite(lr)) throw ValueError(kind_ + ": lr must be a finite number >= 0, got " + std::to_string(lr));
  lr_ = lr;
}

void Optimizer::zero_grad() {
  for (auto& [n, p] : params_) p.zero_grad();
}

Tensor& Optimizer::buffer(const std::string& name, std::size_t i) {
  for (auto& [n, v] : buffers_)
    if (n == name) {
      if (!v[i].defined()) v[i] = Tensor::zeros(params_[i].second.shape(), params_[i].second.dtype());
      return v[i];
    }
  buffers_.emplace_back(name, std::vector<Tensor>(params_.size()));
  auto& v = buffers_.back().second;
  v[i] = Tensor::zeros(params_[i].second.shape(), params_[i].second.dtype());
  return v[i];
}

void Optimizer::step() {
  // Check every gradient first so that a failure changes nothing.
  for (auto& [n, p] : params_) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    const bool ok = dispatch_float(g.dtype(), "optimizer", [&]<class T>() { return all_finite<T>(g); });
    if (!ok)
      throw NumericError(kind_ + ".step (step " + std::to_string(step_ + 1) + "): gradient of parameter '" + n + "' " +
                         p.shape_str() + " has non-finite values; no parameter or optimiser state was changed");
  }
  autograd::NoGradGuard ng;
  ++step_;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    update(i, p, g.dtype() == p.dtype() ? g.contiguous() : g.to(p.dtype()));
  }
}

NamedParams Optimizer::state() const {
  NamedParams out;
  out.emplace_back("step", Tensor::scalar(static_cast<double>(step_), DType::F64));
  out.emplace_back("lr", Tensor::scalar(lr_, DType::F64));
  for (auto& [bn, v] : buffers_)
    for (std::size_t i = 0; i < v.size(); ++i)
      if (v[i].defined()) out.emplace_back(kind_ + "." + bn + "." + params_[i].first, v[i]);
  return out;
}

void Optimizer::load_state(const NamedParams& st) {
  // Validate everything before changing anything.
  std::int64_t step = -1;
  double lr = lr_;
  std::vector<std::tuple<std::string, std::size_t, Tensor>> bufs;
  for (auto& [name, t] : st) {
    if (name == "step") {
      // A count stored as a double: a whole number in [0, 2^53] (casting anything else is undefined).
      const double v = t.item();
      if (!(v >= 0 && v <= 9007199254740992.0 && v == std::floor(v)))
        throw ValueError(kind_ + ".load_state: 'step' must be a whole number of steps >= 0, got " + std::to_string(v));
      step = static_cast<std::int64_t>(v);
      continue;
    }
    if (name == "lr") {
      lr = t.item();
      if (!(lr >= 0.0) || !std::isfinite(lr))
        throw ValueError(kind_ + ".load_state: 'lr' must be a finite number >= 0, got " + std::to_string(lr));
      continue;
    }
    const std::string pre = kind_ + ".";
    if (name.rfind(pre, 0) != 0) throw ValueError(kind_ + ".load_state: unexpected entry '" + name + "'");
    const std::string rest = name.substr(pre.size());
    const auto dot = rest.find('.');
    if (dot == std::string::npos) throw ValueError(kind_ + ".load_state: malformed entry '" + name + "'");
    const std::string bn = rest.substr(0, dot), pn = rest.substr(dot + 1);
    std::size_t idx = params_.size();
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (params_[i].first == pn) idx = i;
    if (idx == params_.size()) throw ValueError(kind_ + ".load_state: entry '" + name + "' names no parameter");
    if (t.shape() != params_[idx].second.shape())
      throw ShapeError(kind_ + ".load_state: '" + name + "' has shape " + t.shape_str() + " but the parameter has " +
                       params_[idx].second.shape_str());
    bufs.emplace_back(bn, idx, t);
  }
  if (step < 0) throw ValueError(kind_ + ".load_state: the state has no 'step' entry");
  step_ = step;
  lr_ = lr;
  buffers_.clear();
  for (auto& [bn, idx, t] : bufs) buffer(bn, idx).copy_(t);
}

// ---------------------------------------------------------------- SGD

SGD::SGD(NamedParams params, const SGDOptions& o) : Optimizer(std::move(params), "SGD"), o_(o) { validate(); }
SGD::SGD(const std::vector<Tensor>& params, const SGDOptions& o) : Optimizer(params, "SGD"), o_(o) { validate(); }

void SGD::validate() {
  set_lr(o_.lr);
  if (!(o_.momentum >= 0.0)) throw ValueError("SGD: momentum must be >= 0, got " + std::to_string(o_.momentum));
  if (!(o_.weight_decay >= 0.0)) throw ValueError("SGD: weight_decay must be >= 0, got " + std::to_string(o_.weight_decay));
  if (o_.nesterov && (o_.momentum <= 0.0 || o_.dampening != 0.0))
    throw ValueError("SGD: nesterov needs momentum > 0 and dampening == 0");
}

void SGD::update(std::size_t i, const Tensor& p, const Tensor& g) {
  const bool first = steps() == 1 || !o_.momentum;
  Tensor* buf = o_.momentum ? &buffer("momentum_buffer", i) : nullptr;
  dispatch_float(p.dtype(), "SGD", [&]<class T>() {
    T* pp = p.data<T>();
    const T* gp = g.data<T>();
    T* bp = buf ? buf->data<T>() : nullptr;
    const double lr = lr_, wd = o_.weight_decay, mom = o_.momentum, damp = o_.dampening;
    for (std::int64_t k = 0, n = p.numel(); k < n; ++k) {
      T d = gp[k];
      if (wd != 0) d = d + static_cast<T>(wd) * pp[k];  // g += wd * p
      if (bp) {
        // buf = g (first step) else mom * buf + (1 - dampening) * g
        bp[k] = first ? d : static_cast<T>(mom) * bp[k] + static_cast<T>(1 - damp) * d;
        d = o_.nesterov ? d + static_cast<T>(mom) * bp[k] : bp[k];
      }
      pp[k] = pp[k] - static_cast<T>(lr) * d;
    }
  });
}

// ---------------------------------------------------------------- Adam / AdamW

Adam::Adam(NamedParams params, const AdamOptions& o) : Optimizer(std::move(params), "Adam"), o_(o) { validate(); }
Adam::Adam(const std::vector<Tensor>& params, const AdamOptions& o) : Optimizer(params, "Adam"), o_(o) { validate(); }
Adam::Adam(NamedParams params, const AdamOptions& o, bool decoupled, const char* kind)
    : Optimizer(std::move(params), kind), o_(o), decoupled_(decoupled) {
  validate();
}

void Adam::validate() {
  set_lr(o_.lr);
  if (!(o_.beta1 >= 0.0 && o_.beta1 < 1.0) || !(o_.beta2 >= 0.0 && o_.beta2 < 1.0))
    throw ValueError(kind_ + ": betas must be in [0, 1), got (" + std::to_string(o_.beta1) + ", " +
                     std::to_string(o_.beta2) + ")");
  if (!(o_.eps >= 0.0)) throw ValueError(kind_ + ": eps must be >= 0, got " + std::to_string(o_.eps));
  if (!(o_.weight_decay >= 0.0))
    throw ValueError(kind_ + ": weight_decay must be >= 0, got " + std::to_string(o_.weight_decay));
}

void Adam::update(std::size_t i, const Tensor& p, const Tensor& g) {
  Tensor& m = buffer("exp_avg", i);
  Tensor& v = buffer("exp_avg_sq", i);
  Tensor* vmax = o_.amsgrad ? &buffer("max_exp_avg_sq", i) : nullptr;
  const double t = static_cast<double>(steps());
  const double bc1 = 1.0 - std::pow(o_.beta1, t), bc2 = 1.0 - std::pow(o_.beta2, t);
  const double step_size = lr_ / bc1, bc2_sqrt = std::sqrt(bc2);
  dispatch_float(p.dtype(), kind_.c_str(), [&]<class T>() {
    T* pp = p.data<T>();
    const T* gp = g.data<T>();
    T* mp = m.data<T>();
    T* vp = v.data<T>();
    T* xp = vmax ? vmax->data<T>() : nullptr;
    const double wdd = !no_decay_.empty() && no_decay_[i] ? 0.0 : o_.weight_decay;
    const T b1 = static_cast<T>(o_.beta1), b2 = static_cast<T>(o_.beta2), wd = static_cast<T>(wdd);
    const T decay = static_cast<T>(1.0 - lr_ * wdd);
    const bool decoupled = decoupled_;
    const T eps = static_cast<T>(o_.eps), bc2s = static_cast<T>(bc2_sqrt), ss = static_cast<T>(step_size);
    // Element by element, so any split over threads gives the same bits (a 1M-element
    // matrix took 1.7% of a GPT training step's CPU time on the calling thread alone).
    parallel_for(0, p.numel(), 1 << 15, [&](std::int64_t kb, std::int64_t ke) {
      for (std::int64_t k = kb; k < ke; ++k) {
        T d = gp[k];
        if (decoupled) {
          pp[k] = pp[k] * decay;  // AdamW: p *= 1 - lr * wd
        } else if (wdd != 0) {
          d = d + wd * pp[k];  // Adam: g += wd * p
        }
        mp[k] = mp[k] + (d - mp[k]) * (T(1) - b1);   // m = b1 m + (1 - b1) g  (torch's lerp form)
        vp[k] = vp[k] * b2 + d * d * (T(1) - b2);    // v = b2 v + (1 - b2) g^2
        T vv = vp[k];
        if (xp) {
          xp[k] = std::max(xp[k], vp[k]);
          vv = xp[k];
        }
        const T denom = std::sqrt(vv) / bc2s + eps;
        pp[k] = pp[k] - ss * mp[k] / denom;
      }
    });
  });
}

std::size_t Adam::exclude_from_weight_decay(const std::function<bool(const std::string&)>& exempt) {
  no_decay_.assign(params_.size(), 0);
  std::size_t n = 0;
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (exempt(params_[i].first)) {
      no_decay_[i] = 1;
      ++n;
    }
  return n;
}

AdamW::AdamW(NamedParams params, const AdamOptions& o) : Adam(std::move(params), o, true, "AdamW") {}
AdamW::AdamW(const std::vector<Tensor>& params, const AdamOptions& o) : Adam([&] {
  NamedParams out;
  for (std::size_t i = 0; i < params.size(); ++i) out.emplace_back(std::to_string(i), params[i]);
  return out;
}(), o, true, "AdamW") {}

// ---------------------------------------------------------------- clipping

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, NonFinite on_nonfinite) {
  if (!(max_norm > 0.0)) throw ValueError("clip_grad_norm: max_norm must be > 0, got " + std::to_string(max_norm));
  double sq = 0;
  for (const auto& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    // Each value widened to double and summed in element order (no copy of the gradient).
    dispatch_float(g.dtype(), "clip_grad_norm", [&]<class T>() {
      const Tensor gc = g.contiguous();
      const T* d = gc.data<T>();
      for (std::int64_t k = 0, n = gc.numel(); k < n; ++k) {
        const double x = static_cast<double>(d[k]);
        sq += x * x;
      }
    });
  }
  const double norm = std::sqrt(sq);
  if (!std::isfinite(norm)) {
    if (on_nonfinite == NonFinite::Error)
      throw NumericError("clip_grad_norm: the total gradient norm is non-finite (" + std::to_string(norm) +
                         "); gradients were left unchanged");
    return norm;
  }
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    for (const auto& p : params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      dispatch_float(g.dtype(), "clip_grad_norm", [&]<class T>() {
        Tensor gc = g.contiguous();
        T* d = gc.data<T>();
        for (std::int64_t k = 0, n = gc.numel(); k < n; ++k) d[k] = d[k] * static_cast<T>(coef);
        if (!g.is_same(gc)) p.set_grad(gc);
      });
    }
  }
  return norm;
}

}  // namespace qkv::optim
