// The tests share the precompiled header built with this program (tests/CMakeLists.txt); it runs
// no test.
