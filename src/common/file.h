// common/file.h — a whole file read into memory with read(2), its errors as Status naming the file: a directory,
// a missing file, a read that fails part way (EIO, a /proc entry whose process was reaped). Never an exception —
// libstdc++'s filebuf throws on a failed read whatever a stream's exception mask says, which aborts the process.
// Non-goals: memory mapping, partial reads of large files (the safetensors reader has its own).
#pragma once

#include <string>
#include <string_view>

#include "zerowire/status.h"

namespace zw {

// Everything left to read from fd (left open). `what` names it in the error ("checkpoint /ckpt/model.bin").
Result<std::string> read_fd(int fd, std::string_view what);

// The file at path whole. `what` says what it is for ("data file", "DeepSpeed config"): the error reads "cannot read
// DeepSpeed config /tmp: /tmp is a directory, not a file"; a missing file is kNotFound, other failures kSystem.
Result<std::string> read_file(const std::string& path, std::string_view what);

}  // namespace zw
