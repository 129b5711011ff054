// Opening a user's input file (a checkpoint, an IDX file, a packed set): anything but a regular
// file is refused before a read can block. open() of a FIFO blocks until a writer appears, and a
// read of a FIFO, socket or terminal waits for input that may never come, deaf to the SIGINT/SIGTERM
// handlers that only ask the program to stop; so the file is opened with O_NONBLOCK (which returns
// at once for every kind of file) and fstat() says what it is before anything is read.
#pragma once

#include <cstdint>
#include <string>

namespace ember::io {

// A blocking, close-on-exec descriptor of the regular file `path` (the caller closes it), and its
// size in *size when given. Throws ember::Error naming the path and what it is otherwise ("is a
// FIFO, not a regular file"), or why it cannot be opened ("File name too long", ...).
int open_regular_file(const std::string& path, uint64_t* size = nullptr);

// "a FIFO", "a directory", "a socket", "a character device", ... for an st_mode.
const char* file_kind_name(unsigned mode);

}  // namespace ember::io
