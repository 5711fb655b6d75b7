//===- PythonError.h - Raise moe_mlir.Error from C++ ------------*- C++ -*-===//
//
// Both extensions raise the one exception class of moe_mlir/_errors.py, so
// that Python code catches compiler and runtime failures alike.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_PYTHON_PYTHONERROR_H
#define MOE_PYTHON_PYTHONERROR_H

#include <pybind11/pybind11.h>

#include <stdexcept>

namespace moe_python {

/// A failure of the compiler or the runtime; Python sees moe_mlir.Error with
/// the same message.
class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

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
