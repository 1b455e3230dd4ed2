// common/inline_function.h — a move-only callable that keeps its target inside itself when it fits in `Capacity`
// bytes (no allocation), else on the heap. The communicator's queued tasks use it: a host collective's task captures
// its CollectiveOptions (~150 bytes), which std::function (16 bytes inline in libstdc++) allocates for every
// operation — one malloc/free pair, ~400 instructions of a 4 KiB operation's ~4,300 (docs/PERF.md).
// Threading: none (like std::function). Non-goals: copying, const calls, small-size tuning per target.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace zw {

template <typename Signature, size_t Capacity>
class InlineFunction;

template <typename R, typename... Args, size_t Capacity>
class InlineFunction<R(Args...), Capacity> {
 public:
  // Whether a target of type F is kept inline (callers that must not allocate static_assert it).
  template <typename F>
  static constexpr bool kFitsInline =
      sizeof(F) <= Capacity && alignof(F) <= alignof(std::max_align_t) && std::is_nothrow_move_constructible_v<F>;

  InlineFunction() = default;
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, InlineFunction> &&
                                                    std::is_invocable_r_v<R, std::decay_t<F>&, Args...>>>
  InlineFunction(F&& f) {  // NOLINT(google-explicit-constructor): converts like std::function
    using T = std::decay_t<F>;
    if constexpr (kFitsInline<T>) {
      ::new (static_cast<void*>(buf_)) T(std::forward<F>(f));
      ops_ = &kInlineOps<T>;
    } else {
      *reinterpret_cast<T**>(buf_) = new T(std::forward<F>(f));
      ops_ = &kHeapOps<T>;
    }
  }
  InlineFunction(InlineFunction&& o) noexcept { take(o); }
  InlineFunction& operator=(InlineFunction&& o) noexcept {
    if (this != &o) {
      reset();
      take(o);
    }
    return *this;
  }
  InlineFunction(const InlineFunction&) = delete;
  InlineFunction& operator=(const InlineFunction&) = delete;
  ~InlineFunction() { reset(); }

  explicit operator bool() const { return ops_ != nullptr; }
  // Calls the target (which must be set).
  R operator()(Args... args) { return ops_->call(buf_, std::forward<Args>(args)...); }

 private:
  struct Ops {
    R (*call)(void* self, Args&&... args);
    void (*move)(void* dst, void* src);  // move-constructs dst from src and destroys src
    void (*destroy)(void* self);
  };
  template <typename T>
  static constexpr Ops kInlineOps = {
      [](void* s, Args&&... a) -> R { return (*static_cast<T*>(s))(std::forward<Args>(a)...); },
      [](void* d, void* s) {
        ::new (d) T(std::move(*static_cast<T*>(s)));
        static_cast<T*>(s)->~T();
      },
      [](void* s) { static_cast<T*>(s)->~T(); }};
  template <typename T>
  static constexpr Ops kHeapOps = {
      [](void* s, Args&&... a) -> R { return (**static_cast<T**>(s))(std::forward<Args>(a)...); },
      [](void* d, void* s) { *static_cast<T**>(d) = *static_cast<T**>(s); },
      [](void* s) { delete *static_cast<T**>(s); }};

  void take(InlineFunction& o) noexcept {
    if (o.ops_ == nullptr) return;
    o.ops_->move(buf_, o.buf_);
    ops_ = o.ops_;
    o.ops_ = nullptr;
  }
  void reset() noexcept {
    if (ops_ != nullptr) ops_->destroy(buf_);
    ops_ = nullptr;
  }

  alignas(std::max_align_t) std::byte buf_[Capacity < sizeof(void*) ? sizeof(void*) : Capacity];
  const Ops* ops_ = nullptr;
};

}  // namespace zw
