-- premake5.lua: the same targets as the Makefile, for users of premake 5
-- (`premake5 gmake2 && make -C build/premake config=release`). The Makefile needs no tool
-- beyond make and stays the reference build; keep the two in step.

workspace "kiln"
    configurations { "Debug", "Release" }
    location "build/premake"
    language "C"
    cdialect "C11"
    warnings "Extra"
    pic "On"
    includedirs { "core/include", "addons/transform/include" }
    defines { "_POSIX_C_SOURCE=200809L" }
    targetdir "build/premake/%{cfg.buildcfg}"
    objdir "build/premake/obj/%{cfg.buildcfg}/%{prj.name}"

    filter "configurations:Debug"
        symbols "On"
        optimize "Debug"

    filter "configurations:Release"
        defines { "NDEBUG" }
        optimize "Speed"
        symbols "On"

    filter {}

-- The core as a static library (libkiln.a) ...
project "kiln"
    kind "StaticLib"
    files { "core/include/kiln.h", "core/src/*.c", "core/src/*.h", "addons/*/include/*.h", "addons/*/src/*.c", "addons/*/src/*.h" }
    includedirs { "core/src" }

-- ... and as a shared library (libkiln.so) built from the same sources.
project "kiln_shared"
    kind "SharedLib"
    targetname "kiln"
    files { "core/include/kiln.h", "core/src/*.c", "core/src/*.h", "addons/*/include/*.h", "addons/*/src/*.c", "addons/*/src/*.h" }
    includedirs { "core/src" }
    links { "m", "pthread" }

project "core_demo"
    kind "ConsoleApp"
    files { "examples/core_demo.c" }
    links { "kiln", "m", "pthread" }

-- One executable per Check suite, as in the Makefile.
for _, path in ipairs(os.matchfiles("tests/core/test_*.c")) do
    project(path:match("([^/]+)%.c$"))
        kind "ConsoleApp"
        files { path, "tests/support/*.c", "tests/support/*.h" }
        includedirs { "tests/support" }
        links { "kiln", "check", "subunit", "rt", "m", "pthread" }
end

-- The Lua layer (lua/kiln/*.lua) is compiled into the binding as C strings.
local embed = "lua5.4 %{wks.location}/../../tools/embed.lua %{wks.location}/../gen/kiln_scripts.h "
    .. table.concat(os.matchfiles("lua/kiln/*.lua"), " ")

-- The binding as a static library for hosts (the kiln command, the sample game).
project "kiln_lua_static"
    kind "StaticLib"
    targetname "kiln_lua"
    files { "lua/kiln_lua.h", "lua/src/*.c", "lua/src/*.h" }
    includedirs { "lua", "/usr/include/lua5.4", "build/gen" }
    prebuildcommands { "{MKDIR} %{wks.location}/../gen", embed }

-- The Lua module (kiln.so, loaded by `require "kiln"`).
project "kiln_lua"
    kind "SharedLib"
    targetname "kiln"
    targetprefix ""
    files { "lua/kiln_lua.h", "lua/src/*.c", "lua/src/*.h" }
    includedirs { "lua", "/usr/include/lua5.4", "build/gen" }
    prebuildcommands { "{MKDIR} %{wks.location}/../gen", embed }
    links { "kiln", "m", "pthread" }

-- The kiln command: scripts, the REPL (libedit), the console client.
project "kiln_cmd"
    kind "ConsoleApp"
    targetname "kiln"
    files { "lua/repl/main.c" }
    includedirs { "lua", "/usr/include/lua5.4", "/usr/include/editline" }
    links { "kiln_lua_static", "kiln", "lua5.4", "edit", "m", "pthread" }

-- The sample game.
project "asteroids"
    kind "ConsoleApp"
    files { "examples/asteroids/*.c", "examples/asteroids/*.h" }
    includedirs { "lua", "/usr/include/lua5.4" }
    links { "kiln_lua_static", "kiln", "lua5.4", "m", "pthread" }

-- The console and REPL suites.
for _, path in ipairs(os.matchfiles("tests/tools/test_*.c")) do
    project(path:match("([^/]+)%.c$"))
        kind "ConsoleApp"
        files { path }
        includedirs { "lua", "/usr/include/lua5.4" }
        defines { 'KILN_BIN_PATH="%{cfg.targetdir}/kiln"' }
        links { "kiln_lua_static", "kiln", "lua5.4", "check", "subunit", "rt", "util", "m", "pthread" }
end

project "core_bench"
    kind "ConsoleApp"
    files { "bench/*.c", "bench/*.h" }
    includedirs { "bench" }
    links { "kiln", "m", "pthread" }

    filter "configurations:Release"
        buildoptions { "-falign-loops=64", "-march=x86-64-v2" }
    filter {}

project "mixed_host"
    kind "ConsoleApp"
    files { "bench/lua/mixed_host.c" }
    includedirs { "lua", "/usr/include/lua5.4" }
    links { "kiln_lua_static", "kiln", "lua5.4", "m", "pthread" }
