"""The component registry's public path (`from zoo.registry import register`, docs/extending.md); the
registry itself is `zoo.core.registry`."""

from zoo.core.registry import (  # noqa: F401
    KINDS,
    Component,
    ComponentError,
    Entry,
    add_builtin_modules,
    available,
    build,
    get,
    import_user_module,
    load_builtins,
    load_plugins,
    parse_spec,
    register,
)
