// qkv::Error hierarchy. Every message names the op, the argument and the
// shapes or values involved, e.g.
//   "matmul: a [2,5,512] @ b [64,512]: a.size(-1)=512 != b.size(-2)=64".
// Library code never exits or aborts on user input; it throws one of these.
#pragma once
#include <stdexcept>
#include <string>

namespace qkv {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};
// Shapes that do not fit together (rank, sizes, broadcasting).
class ShapeError : public Error { using Error::Error; };
// A value out of range (probability, eps, temperature, token id ...).
class ValueError : public Error { using Error::Error; };
// An index out of range (dims, embedding ids, slices).
class IndexError : public Error { using Error::Error; };
// A dtype the op does not support.
class TypeError : public Error { using Error::Error; };
// Misuse of autograd (backward twice through a freed graph, ...).
class AutogradError : public Error { using Error::Error; };
// Sizes too large to allocate, or allocation failure; nothing was allocated.
class AllocError : public Error { using Error::Error; };
// A size (from a user, a file or a config) whose memory cannot fit: overflowing counts,
// or more bytes than the machine has available (core/memory.h). Nothing was allocated.
class ResourceError : public AllocError { using AllocError::AllocError; };
// Files: missing, unreadable, corrupt or hostile contents.
class IOError : public Error { using Error::Error; };
class FormatError : public IOError { using IOError::IOError; };
// A numeric failure the caller must know about (non-finite loss or grad norm).
class NumericError : public Error { using Error::Error; };

}  // namespace qkv
