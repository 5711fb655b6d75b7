"""Helpers shared by the Python tests (Inputs/ is not a lit test)."""


def report(what, call):
    """Prints the exception `call` raises, its type and message, and returns
    it; raising nothing fails the test."""
    try:
        call()
    except Exception as error:  # noqa: BLE001 - the test prints any kind
        print(f"{what}: {type(error).__name__}: {error}")
        return error
    raise AssertionError(f"{what}: raised nothing")
