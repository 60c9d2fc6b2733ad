# Temporary files: a test run leaves nothing in /tmp.
#
# Two halves. The runner (test_helper.tcl) gives the run its own TMPDIR and
# fails "no files left in TMPDIR" when anything is left in it: that catches
# every file made where TMPDIR says. What it cannot see is a path written
# straight into /tmp, which is what this file looks for in the sources of
# the tests and the library: a path that starts with /tmp/ in a C string, a
# Tcl word, a shell word or a Python string. Such a file goes under TMPDIR
# (testMkdtemp in tests/c/testhelp.h, tmpfile in the Tcl suite, mktemp in
# shell) or, for a socket, in the abstract namespace (mc_host.c).

proc tmpfiles_scan {globs pattern} {
    set hits {}
    foreach g $globs {
        foreach f [lsort [glob -nocomplain -directory $::harness(root) {*}$g]] {
            # This file names the patterns it looks for.
            if {[file tail $f] eq "tmpfiles.tcl"} continue
            set fd [open $f r]
            set n 0
            while {[gets $fd line] >= 0} {
                incr n
                # Comments may speak of /tmp; only code makes files. A line
                # that only compares or replaces the path the docs show says so.
                if {[regexp {^\s*(#|//|/\*|\*)} $line]} continue
                if {[string match "*tmpfiles: not a file*" $line]} continue
                if {[regexp $pattern $line]} {
                    lappend hits "[string range $f [string length $::harness(root)/] end]:$n: [string trim $line]"
                }
            }
            close $fd
        }
    }
    return $hits
}

test {No source writes a path under /tmp directly (TMPDIR, mkdtemp or abstract sockets instead)} {
    set hits {}
    # C: a string literal "/tmp/... (comments may talk about /tmp).
    lappend hits {*}[tmpfiles_scan {src/*.c src/*.h tests/c/*.c tests/c/*.h tests/fuzz/*.c} {"/tmp/}]
    # Tcl words; unix:///tmp/x (an endpoint string, no file) is not one.
    lappend hits {*}[tmpfiles_scan {tests/*.tcl tests/unit/*.tcl tests/integration/*.tcl tests/support/*.tcl} \
                         {(^|[\s"\{\[])/tmp/}]
    # Shell words (${TMPDIR:-/tmp} is the right way and is not matched).
    lappend hits {*}[tmpfiles_scan {tests/runtest tests/fuzz/*.sh} {(^|[\s"'=])/tmp/}]
    lappend hits {*}[tmpfiles_scan {tests/helpers/*.py} {["']/tmp/}]
    assert_equal {} $hits "hard-coded /tmp paths:\n[join $hits \n]"
}

test {The runner gave this run a TMPDIR of its own} {
    # Set by test_helper.tcl for every process of the run; a worker sees it.
    assert {[info exists ::env(TMPDIR)]}
    assert_match {*/mooncake-tests.*} $::env(TMPDIR)
    assert_equal 1 [file isdirectory $::env(TMPDIR)]
}
