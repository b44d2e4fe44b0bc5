-- premake5.lua: the Makefile's targets for premake 5 users; `make test-premake` builds with it
-- and runs the suites against the result. Every path is absolute, so it builds from any directory.
--
--   premake5 --file=PATH/premake5.lua gmake       (writes PATH/build/premake; older premake 5: gmake2)
--   make -C PATH/build/premake config=release     (or debug; bench for the benchmark flags)
--
-- The Makefile needs no tool beyond make and a C compiler and stays the reference build; the
-- version comes from core/include/kiln.h in both.

newoption {
    trigger = "builddir",
    value = "DIR",
    description = "Where the makefiles, objects and binaries go (default: build/premake)",
}
local root = _MAIN_SCRIPT_DIR
local out = _OPTIONS["builddir"] and path.getabsolute(_OPTIONS["builddir"]) or root .. "/build/premake"
local gen = out .. "/gen"

-- The version, read from the one place it is written.
local function version_part(name)
    local header = io.readfile(root .. "/core/include/kiln.h") or ""
    return header:match("#define KILN_VERSION_" .. name .. " (%d+)")
        or error("premake5.lua: KILN_VERSION_" .. name .. " not found in core/include/kiln.h")
end
local major = version_part("MAJOR")

-- Include directories and libraries of a Debian package, from pkg-config, with fallbacks
-- for a machine without the .pc file.
local function pkg_values(package, option, pattern, fallback)
    local text, code = os.outputof("pkg-config " .. option .. " " .. package .. " 2>/dev/null")
    if code ~= 0 or not text then return fallback end
    local values = {}
    for v in text:gmatch(pattern) do values[#values + 1] = v end
    return values
end
local function pkg_includes(package, fallback) return pkg_values(package, "--cflags-only-I", "%-I(%S+)", fallback) end
local function pkg_links(package, fallback) return pkg_values(package, "--libs-only-l", "%-l(%S+)", fallback) end

local lua_includes = pkg_includes("lua5.4", { "/usr/include/lua5.4" })
local cglm_includes = pkg_includes("cglm", {})
local edit_includes = pkg_includes("libedit", { "/usr/include/editline" })
local lua_links = pkg_links("lua5.4", { "lua5.4" })
local check_links = pkg_links("check", { "check", "subunit", "rt", "m" })
local edit_links = pkg_links("libedit", { "edit" })

local function concat(...)
    local list = {}
    for _, part in ipairs({ ... }) do
        for _, item in ipairs(part) do list[#list + 1] = item end
    end
    return list
end

workspace "kiln"
    -- Debug and Release keep kiln's assertions (the abort tests rely on them), as the
    -- Makefile does; Bench turns them off and adds the benchmark flags of `make bench`.
    configurations { "Debug", "Release", "Bench" }
    location(out)
    language "C"
    cdialect "C11"
    warnings "Extra"
    -- as the Makefile's FP: no fused multiply-add, so FMA builds hash as the others do
    buildoptions { "-ffp-contract=off" }
    buildoptions { "-Wpedantic", "-Wshadow", "-Wstrict-prototypes", "-Wmissing-prototypes",
        "-Wno-unused-parameter" }
    if os.getenv("CI") == "true" then buildoptions { "-Werror" } end -- as the Makefile in CI
    pic "On"
    includedirs { root .. "/core/include", root .. "/addons/transform/include",
        root .. "/addons/persist/include" } -- persist: jansson links below, xxHash is header-only
    externalincludedirs(cglm_includes)
    defines { "_POSIX_C_SOURCE=200809L" }
    targetdir(out .. "/%{cfg.buildcfg}")
    objdir(out .. "/obj/%{cfg.buildcfg}/%{prj.name}")

    filter "configurations:Debug"
        symbols "On"
        optimize "Debug"

    -- optimize "On" is -O2, the Makefile's OPT and BENCH_OPT level.
    filter "configurations:Release"
        optimize "On"
        symbols "On"

    filter "configurations:Bench"
        defines { "NDEBUG" }
        optimize "On"
        buildoptions { "-falign-loops=64", "-march=x86-64-v2" }

    filter {}

local core_files = {
    root .. "/core/include/kiln.h", root .. "/core/src/*.c", root .. "/core/src/*.h",
    root .. "/addons/*/include/*.h", root .. "/addons/*/src/*.c", root .. "/addons/*/src/*.h",
}

-- The core and the addons as a static library (libkiln.a) ...
project "kiln"
    kind "StaticLib"
    files(core_files)
    includedirs { root .. "/core/src" }

-- ... and as a shared library, with the Makefile's soname (libkiln.so.MAJOR).
project "kiln_shared"
    kind "SharedLib"
    targetname "kiln"
    files(core_files)
    includedirs { root .. "/core/src" }
    linkoptions { "-Wl,-soname,libkiln.so." .. major }
    links { "m", "pthread", "jansson" }

-- ... and as a release build compiles it (NDEBUG: no assertions), for the suite of what such a
-- build refuses where the others abort first (test_release_refusals), as the Makefile does.
project "kiln_ndebug"
    kind "StaticLib"
    files(core_files)
    includedirs { root .. "/core/src" }
    defines { "NDEBUG" }

project "core_demo"
    kind "ConsoleApp"
    files { root .. "/examples/core_demo.c" }
    links { "kiln", "m", "pthread", "jansson" }

-- One executable per Check suite, as in the Makefile.
for _, file in ipairs(os.matchfiles(root .. "/tests/core/test_*.c")) do
    project(path.getbasename(file))
        kind "ConsoleApp"
        files { file, root .. "/tests/support/*.c", root .. "/tests/support/*.h" }
        includedirs { root .. "/tests/support" }
        -- white-box suites that include an addon's internal header (it names core/src's)
        local white_box = { test_persist_schema_names = true, test_persist_names = true }
        if white_box[path.getbasename(file)] then includedirs { root .. "/core/src" } end
        -- kiln_save_file's failures: fsync, fstat, open and fchmod wrapped, to make them fail and see them called
        if path.getbasename(file) == "test_persist_save_file" then
            linkoptions { "-Wl,--wrap=fsync", "-Wl,--wrap=fstat", "-Wl,--wrap=open", "-Wl,--wrap=fchmod" }
        end
        -- the world hash seed under a coarse clock: clock_gettime wrapped
        if path.getbasename(file) == "test_name_hash" then linkoptions { "-Wl,--wrap=clock_gettime" } end
        local lib = path.getbasename(file) == "test_release_refusals" and "kiln_ndebug" or "kiln"
        links(concat({ lib }, check_links, { "m", "pthread", "jansson" }))
end

-- The C++ suite using the C suites' fixtures (test_support.c compiled as C), as test-cxx.
project "test_cxx_support"
    kind "ConsoleApp"
    language "C++"
    cppdialect "C++11"
    files { root .. "/tests/cxx/test_cxx_support.cpp", root .. "/tests/support/test_support.c" }
    includedirs { root .. "/tests/support" }
    -- the workspace's C-only warnings, which g++ warns of (the C suites build that file with them)
    removebuildoptions { "-Wstrict-prototypes", "-Wmissing-prototypes" }
    links(concat({ "kiln" }, check_links, { "m", "pthread", "jansson" }))

-- The Lua layer (lua/kiln/*.lua) compiled into the binding as C strings. tools/embed.lua
-- rewrites the header only when its text changes, so a rebuild recompiles nothing.
local function quoted(list)
    local out = {}
    for i, p in ipairs(list) do out[i] = '"' .. p .. '"' end
    return table.concat(out, " ")
end
local scripts = os.matchfiles(root .. "/lua/kiln/*.lua")
table.sort(scripts)
local embed = "lua5.4 " .. quoted({ root .. "/tools/embed.lua", gen .. "/kiln_scripts.h" })
    .. " " .. quoted(scripts)

project "kiln_scripts"
    kind "Makefile"
    buildcommands { "{MKDIR} " .. quoted({ gen }), embed }
    rebuildcommands { "{DELETE} " .. quoted({ gen .. "/kiln_scripts.h" }), "{MKDIR} " .. quoted({ gen }), embed }
    cleancommands { "{DELETE} " .. quoted({ gen .. "/kiln_scripts.h" }) }

local binding_files = { root .. "/lua/kiln_lua.h", root .. "/lua/src/*.c", root .. "/lua/src/*.h" }

-- The binding as a static library (libkiln_lua.a) for hosts: the kiln command, the game.
project "kiln_lua_static"
    kind "StaticLib"
    targetname "kiln_lua"
    dependson { "kiln_scripts" }
    files(binding_files)
    includedirs { root .. "/lua", gen }
    externalincludedirs(lua_includes)

-- The Lua module (kiln.so, loaded by `require "kiln"`).
project "kiln_module"
    kind "SharedLib"
    targetname "kiln"
    targetprefix ""
    targetdir(out .. "/%{cfg.buildcfg}/lua")
    dependson { "kiln_scripts" }
    files(binding_files)
    includedirs { root .. "/lua", gen }
    externalincludedirs(lua_includes)
    links { "kiln", "m", "pthread", "jansson" }
    linkoptions { "-Wl,-z,nodelete" } -- never unmapped under a late finalizer (see the Makefile)

-- The kiln command: scripts, the REPL (libedit), the console client.
project "kiln_cmd"
    kind "ConsoleApp"
    targetname "kiln"
    files { root .. "/lua/repl/*.c", root .. "/lua/repl/*.h" }
    includedirs { root .. "/lua" }
    externalincludedirs(concat(lua_includes, edit_includes))
    links(concat({ "kiln_lua_static", "kiln" }, lua_links, edit_links, { "m", "pthread", "jansson" }))

-- The sample game.
project "asteroids"
    kind "ConsoleApp"
    files { root .. "/examples/asteroids/*.c", root .. "/examples/asteroids/*.h" }
    includedirs { root .. "/lua" }
    externalincludedirs(lua_includes)
    links(concat({ "kiln_lua_static", "kiln" }, lua_links, { "m", "pthread", "jansson" }))

-- The console and REPL suites; they start the kiln command by its absolute path.
for _, file in ipairs(os.matchfiles(root .. "/tests/tools/test_*.c")) do
    project(path.getbasename(file))
        kind "ConsoleApp"
        dependson { "kiln_cmd" }
        files { file }
        includedirs { root .. "/lua" }
        -- a suite reading an addon's test-only counter through its internal header
        if path.getbasename(file) == "test_mods_indexes" then includedirs { root .. "/core/src" } end
        -- a file grown between a console statement's charge for it and its read: fstat wrapped
        if path.getbasename(file) == "test_console_persist" then linkoptions { "-Wl,--wrap=fstat" } end
        externalincludedirs(lua_includes)
        defines { 'KILN_BIN_PATH="' .. out .. '/%{cfg.buildcfg}/kiln"' }
        -- the binding over the NDEBUG library: what a release build refuses a host (the Makefile's TOOL_CORE)
        local lib = path.getbasename(file) == "test_lua_release_refusals" and "kiln_ndebug" or "kiln"
        links(concat({ "kiln_lua_static", lib }, lua_links, check_links, { "util", "m", "pthread", "jansson" }))
end

project "core_bench"
    kind "ConsoleApp"
    files { root .. "/bench/*.c", root .. "/bench/*.h" }
    includedirs { root .. "/bench" }
    links { "kiln", "m", "pthread", "jansson" }

project "tick_floor" -- the plain-C bound under iter2_mark (no kiln code)
    kind "ConsoleApp"
    files { root .. "/bench/floor/tick_floor.c" }

project "mixed_host"
    kind "ConsoleApp"
    files { root .. "/bench/lua/mixed_host.c" }
    includedirs { root .. "/lua" }
    externalincludedirs(lua_includes)
    links(concat({ "kiln_lua_static", "kiln" }, lua_links, { "m", "pthread", "jansson" }))
