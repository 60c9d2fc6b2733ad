# make install, as a user of the library meets it: the files land where the
# README says, a program built with `pkg-config --cflags --libs mooncake`
# runs without LD_LIBRARY_PATH and talks to a server, and every place that
# prints a version prints the one in the top-level VERSION file.
#
# The install goes into a temporary PREFIX under tests/tmp, removed at the
# end. It runs src/Makefile's install-files (the install rule without its
# build step): the suite tests the tree as it was built, and a build from
# here could switch that tree's settings (SANITIZER=...) under it.

proc install_read {path} {
    set f [open $path r]
    set t [read $f]
    close $f
    return $t
}

# Runs make in src/ with a clean make environment (the suite may itself run
# under `make test`, whose jobserver descriptors this child does not get).
proc install_make {args} {
    set saved {}
    foreach v {MAKEFLAGS MFLAGS MAKELEVEL} {
        if {[info exists ::env($v)]} { dict set saved $v $::env($v); unset ::env($v) }
    }
    set rc [catch {exec make -C [file join $::harness(root) src] {*}$args 2>@1} out]
    dict for {v val} $saved { set ::env($v) $val }
    if {$rc} { fail "make $args failed:\n$out" }
    return $out
}

# Output of a program with LD_LIBRARY_PATH (and LD_PRELOAD) taken out of its
# environment, so only what the binary itself records can find the library.
proc install_run_bare {args} {
    return [exec env -u LD_LIBRARY_PATH -u LD_PRELOAD {*}$args 2>@1]
}

set install_version [string trim [install_read [file join $::harness(root) VERSION]]]
set install_somajor [lindex [split $install_version .] 0]
set install_src [file join $::harness(root) src]

# What these tests need, or why they skip (each test says so).
set install_why {}
if {![file exists [file join $install_src libmooncake libmooncake.so]]} {
    set install_why "src/libmooncake/libmooncake.so is not built"
}
foreach p {make cc pkg-config ldd} {
    if {[find_program $p] eq ""} { set install_why "$p is not installed" }
}
proc install_need {} {
    if {$::install_why ne ""} { skip $::install_why }
}

start_server {tags {install mooncake}} {
    set prefix [file normalize [tmpfile install]]
    file mkdir $prefix

    test {make install: binaries, header, libraries with soname links, pkg-config file, sample config} {
        install_need
        set out [install_make install-files PREFIX=$prefix]
        assert_match "*installed $prefix/etc/mooncake/mooncake.conf*" $out
        foreach f {bin/mooncake-server bin/mooncake-cli bin/mooncake-benchmark include/mooncake.h
                   lib/libmooncake.a lib/pkgconfig/mooncake.pc etc/mooncake/mooncake.conf} {
            assert_equal 1 [file isfile [file join $prefix $f]] "missing $f"
        }
        # libmooncake.so -> .so.MAJOR (the soname) -> .so.MAJOR.MINOR.PATCH (the file)
        set lib [file join $prefix lib]
        assert_equal libmooncake.so.$install_somajor [file readlink $lib/libmooncake.so]
        assert_equal libmooncake.so.$install_version [file readlink $lib/libmooncake.so.$install_somajor]
        assert_equal file [file type $lib/libmooncake.so.$install_version]
        if {[find_program readelf] ne ""} {
            assert_match "*Library soname: \\\[libmooncake.so.$install_somajor\\\]*" \
                [exec readelf -d $lib/libmooncake.so.$install_version]
        }
        # The installed header stands alone: the version is written in.
        set h [install_read [file join $prefix include mooncake.h]]
        assert_match "*\n#define MC_VERSION \"$install_version\"\n*" $h
        assert_equal [install_read [file join $::harness(root) mooncake.conf]] \
            [install_read [file join $prefix etc mooncake mooncake.conf]]
    }

    test {A program built with pkg-config runs against the installed library, no LD_LIBRARY_PATH} {
        install_need
        set ::env(PKG_CONFIG_PATH) [file join $prefix lib pkgconfig]
        set pcflags [exec pkg-config --cflags --libs mooncake]
        set modversion [exec pkg-config --modversion mooncake]
        unset ::env(PKG_CONFIG_PATH)
        assert_equal $install_version $modversion
        # A prefix outside the linker's search path: the pc file records it.
        assert_match "*-Wl,-rpath,$prefix/lib*" $pcflags

        set src [file join $prefix app.c]
        set f [open $src w]
        puts $f {
#include <mooncake.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    char err[256], buf[64];
    if (argc < 2) { printf("%s %s\n", MC_VERSION, mc_version()); return 0; }
    mc_client *c = mc_connect(argv[1], NULL, err, sizeof(err));
    if (!c) { printf("connect: %s\n", err); return 1; }
    mc_put_opts o = {0};
    o.replace = 1;
    int rc = mc_put(c, "install:k", 9, "installed", 9, &o);
    long long n = rc == MC_OK ? mc_get(c, "install:k", 9, buf, sizeof(buf)) : rc;
    if (n < 0) { printf("error %lld: %s\n", n, mc_last_error(c)); mc_close(c); return 1; }
    printf("%s %s %.*s\n", MC_VERSION, mc_version(), (int)n, buf);
    mc_close(c);
    return 0;
}
        }
        close $f
        # An ASan build's library needs the program linked with the same
        # runtime; take the sanitizer flags the tree was built with.
        set san {}
        catch {
            foreach w [install_read [file join $install_src .make-settings]] {
                if {[string match -f*sanitize* $w]} { lappend san $w }
            }
        }
        set app [file join $prefix app]
        exec cc {*}$san $src -o $app {*}$pcflags 2>@1
        assert_equal "$install_version $install_version" [install_run_bare $app]
        assert_match "*libmooncake.so.$install_somajor => $prefix/lib/*" [install_run_bare ldd $app]
        set uri "tcp://[srv 0 host]:[srv 0 port]"
        assert_equal "$install_version $install_version installed" [install_run_bare $app $uri]
        assert_equal installed [r get install:k]
    }

    test {One version everywhere: binaries, INFO, HELLO, library, pkg-config} {
        install_need
        set v $install_version
        assert_match "Mooncake server v=$v *" [exec $prefix/bin/mooncake-server --version]
        assert_equal "mooncake-cli $v" [exec $prefix/bin/mooncake-cli --version]
        assert_equal "mooncake-benchmark $v" [exec $prefix/bin/mooncake-benchmark --version]
        assert_equal $v [get_info_field r server mooncake_version]
        set c [redis_client]
        set hello [$c hello 3]
        $c close
        assert_equal $v [dict get $hello mooncake_version]
        # HELLO's version is the Redis release followed, as INFO's redis_version.
        assert_equal [get_info_field r server redis_version] [dict get $hello version]
        assert_not_equal $v [dict get $hello version]
    }

    test {make install puts the Python package where python3 looks, and it talks to a server} {
        install_need
        set ext [glob -nocomplain [file join $::harness(root) build python mooncake _mooncake*.so]]
        if {$ext eq ""} { skip "the Python binding is not built (python3-dev missing)" }
        set out [install_make install-files PREFIX=$prefix]
        set pyver [exec /usr/bin/python3 -c {import sys; print("%d.%d" % sys.version_info[:2])}]
        set pydir [file join $prefix lib python$pyver dist-packages]
        assert_match "*installed the Python package in $pydir*" $out
        # A prefix python3 does not search: the install says how to reach it.
        assert_match "*does not look there: run it with PYTHONPATH=$pydir*" $out
        foreach f {__init__.py store.py} {
            assert_equal 1 [file isfile [file join $pydir mooncake $f]] "missing $f"
        }
        set script {
import sys, mooncake
from mooncake.store import MooncakeDistributedStore
assert mooncake.__file__.startswith(sys.argv[1]), mooncake.__file__
s = MooncakeDistributedStore()
assert s.setup("py", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", sys.argv[2]) == 0
assert s.put("install:py", b"from python") == 0
print(mooncake.__version__, s.get("install:py").decode())
s.close()
}
        set got [exec env PYTHONPATH=$pydir {*}[python_sanitizer_env] /usr/bin/python3 -c $script \
            $pydir "[srv 0 host]:[srv 0 port]" 2>@1]
        assert_equal "$install_version from python" $got
        assert_equal "from python" [r get install:py]
    }

    test {The installed server's --help names the installed sample config} {
        install_need
        catch {exec $prefix/bin/mooncake-server --help 2>@1} help
        assert_match "*$prefix/etc/mooncake/mooncake.conf*" $help
    }

    test {make install again keeps an edited mooncake.conf and puts the sample beside it} {
        install_need
        set conf [file join $prefix etc mooncake mooncake.conf]
        set f [open $conf a]
        puts $f "# the operator's own line"
        close $f
        set out [install_make install-files PREFIX=$prefix]
        assert_match "*kept $conf*$conf.default*" $out
        assert_match "*# the operator's own line*" [install_read $conf]
        assert_equal [install_read [file join $::harness(root) mooncake.conf]] [install_read $conf.default]
    }

    test {PREFIX=/usr/local (staged with DESTDIR): no rpath, the linker's path and ldconfig find it} {
        install_need
        set stage [file join $prefix stage]
        set out [install_make install-files PREFIX=/usr/local DESTDIR=$stage]
        set pc [install_read [file join $stage usr local lib pkgconfig mooncake.pc]]
        assert_match "*prefix=/usr/local\n*" $pc
        assert_no_match "*rpath,\${libdir}*" $pc
        # A staged install leaves ldconfig to whoever unpacks it.
        assert_no_match "*ldconfig*" $out
        assert_equal 1 [file isfile [file join $stage usr local etc mooncake mooncake.conf]]
    }

    file delete -force $prefix
}
