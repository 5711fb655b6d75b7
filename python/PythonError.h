//===- PythonError.h - Raise moe_mlir.Error from C++ ------------*- C++ -*-===//
//
// Both extensions raise the one exception class of moe_mlir/_errors.py, so
// that Python code catches compiler and runtime failures alike, with their
// messages whole; and both read integer arguments the one checked way.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_PYTHON_PYTHONERROR_H
#define MOE_PYTHON_PYTHONERROR_H

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

namespace moe_python {

/// `text` with each byte that is not part of well-formed UTF-8 written as
/// `\xNN`, as Python's "backslashreplace" decodes it: what crosses into a
/// Python str. A diagnostic may quote raw bytes of the IR (a symbol name
/// spelled `@"\ff"`), and Python refuses ill-formed UTF-8 outright, which
/// lost the whole message.
inline std::string backslashReplace(const std::string &text) {
  auto at = [&](size_t index) -> unsigned {
    return index < text.size() ? static_cast<unsigned char>(text[index]) : 0;
  };
  std::string result;
  result.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    unsigned lead = at(i);
    // The length of the sequence `lead` starts and the range of its second
    // byte (Unicode's table of well-formed sequences); 0: no sequence.
    size_t length = lead < 0x80   ? 1
                    : lead < 0xC2 ? 0
                    : lead < 0xE0 ? 2
                    : lead < 0xF0 ? 3
                    : lead < 0xF5 ? 4
                                  : 0;
    unsigned low = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
    unsigned high = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
    bool valid = length > 0;
    for (size_t k = 1; valid && k < length; ++k) {
      unsigned byte = at(i + k);
      valid = k == 1 ? byte >= low && byte <= high : (byte & 0xC0) == 0x80;
    }
    if (valid) {
      result.append(text, i, length);
      i += length;
      continue;
    }
    static const char kHex[] = "0123456789abcdef";
    result += {'\\', 'x', kHex[lead >> 4], kHex[lead & 15]};
    ++i;
  }
  return result;
}

/// A failure of the compiler or the runtime; Python sees moe_mlir.Error with
/// the same message.
class Error : public std::runtime_error {
public:
  explicit Error(const std::string &message)
      : std::runtime_error(backslashReplace(message)) {}
};

/// `value` as the int64 argument `name`: an int (or any object with
/// __index__, such as numpy's integers) but not a bool, within int64's range.
/// pybind11's own conversion takes True as 1 and answers 2^63 with a
/// TypeError listing overloads.
inline int64_t int64Argument(pybind11::handle value, const std::string &name) {
  if (PyBool_Check(value.ptr()) || !PyIndex_Check(value.ptr()))
    throw pybind11::type_error(name + " must be an int, got " +
                               Py_TYPE(value.ptr())->tp_name);
  auto index =
      pybind11::reinterpret_steal<pybind11::int_>(PyNumber_Index(value.ptr()));
  if (!index)
    throw pybind11::error_already_set();
  int overflow = 0;
  long long result = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow)
    throw pybind11::value_error(name + " is " +
                                pybind11::str(index).cast<std::string>() +
                                ", outside int64's range");
  if (result == -1 && PyErr_Occurred())
    throw pybind11::error_already_set();
  return result;
}

/// Makes pybind11 raise moe_mlir.Error for Error. Call once from the
/// extension's init.
inline void registerErrorTranslator() {
  // Never released: the class must outlive every module that raises it, and
  // the interpreter tears modules down in no fixed order.
  static PyObject *errorClass =
      pybind11::object(
          pybind11::module_::import("moe_mlir._errors").attr("Error"))
          .release()
          .ptr();
  pybind11::register_exception_translator([](std::exception_ptr pointer) {
    try {
      if (pointer)
        std::rethrow_exception(pointer);
    } catch (const Error &error) {
      PyErr_SetString(errorClass, error.what());
    }
  });
}

} // namespace moe_python

#endif // MOE_PYTHON_PYTHONERROR_H
