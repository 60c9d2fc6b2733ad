# test_helper.tcl -- the test runner behind tests/runtest.
#
# The runner finds the test files (tests/unit/*.tcl, tests/integration/*.tcl,
# sorted), runs each one in its own tclsh worker process, one after the
# other, then runs the C test programs (build/tests/test_*), and ends with
# the single line "N passed, N failed[, N skipped]".
#
# One worker per file keeps files from leaking state into each other and
# lets the runner survive anything a file does: a worker that crashes, hangs
# past --timeout or ends without its count line is one more failure, its
# servers are killed (their pids sit in tests/tmp/server.<worker>.*/pid),
# and the run goes on with the next file.
#
# The run gets a TMPDIR of its own, which must be empty at the end: the
# last result is "no files left in TMPDIR" (see tmpdir_open).
#
# Worker protocol: the worker prints the test lines ([ok] / [err] / [skip])
# as they happen and, last, "@@counts PASSED FAILED SKIPPED".

set ::harness(testsdir) [file dirname [file normalize [info script]]]
set ::harness(root) [file dirname $::harness(testsdir)]
set ::harness(tmpdir) [file join $::harness(testsdir) tmp]

proc usage {} {
    puts {Usage: tests/runtest [options]
  --server-binary PATH  server to test (default src/mooncake-server); a binary
                        named redis-server runs in development mode: tests
                        tagged mooncake are skipped
  --single FILE         run only this test file (unit/name, repeatable);
                        C tests are then skipped unless --c-tests is given
  --tags "T -T ..."     run only tests with one of the tags T; never those
                        with a tag -T
  --only PATTERN        run only tests whose name matches the glob (repeatable)
  --verbose             show test timings, server starts, C test output
  --c-tests DIR         directory of C test programs test_* (default build/tests)
  --skip-c-tests        do not run the C test programs
  --timeout SECS        per test file / C program limit (default 600)
  --dont-clean          keep tests/tmp/server.* directories
  --list                list the test files and exit
  --help                this text}
}

proc abspath {p} {
    return [file normalize $p]
}

# ------------------------------------------------------------- options

set ::harness(binary) [file join $::harness(root) src mooncake-server]
set ::harness(verbose) 0
set ::harness(allowtags) {}
set ::harness(denytags) {}
set ::harness(only) {}
set ::harness(single) {}
set ::harness(ctests) [file join $::harness(root) build tests]
set ::harness(ctests_given) 0
set ::harness(skip_ctests) 0
set ::harness(timeout) 600
set ::harness(dontclean) 0
set ::harness(startup_ms) 10000
set ::harness(worker) {}
set ::harness(list) 0

set argv_copy $argv
for {set i 0} {$i < [llength $argv_copy]} {incr i} {
    set opt [lindex $argv_copy $i]
    set arg [lindex $argv_copy [expr {$i + 1}]]
    switch -exact -- $opt {
        --server-binary { set ::harness(binary) [abspath $arg]; incr i }
        --single {
            # Accept unit/x, unit/x.tcl, tests/unit/x.tcl.
            set f [regsub {^.*?(unit|integration)/} $arg {\1/}]
            if {![string match *.tcl $f]} { append f .tcl }
            lappend ::harness(single) $f
            incr i
        }
        --tags {
            foreach t $arg {
                if {[string index $t 0] eq "-"} {
                    lappend ::harness(denytags) [string range $t 1 end]
                } else {
                    lappend ::harness(allowtags) $t
                }
            }
            incr i
        }
        --only { lappend ::harness(only) $arg; incr i }
        --verbose { set ::harness(verbose) 1 }
        --c-tests { set ::harness(ctests) [abspath $arg]; set ::harness(ctests_given) 1; incr i }
        --skip-c-tests { set ::harness(skip_ctests) 1 }
        --timeout { set ::harness(timeout) $arg; incr i }
        --dont-clean { set ::harness(dontclean) 1 }
        --list { set ::harness(list) 1 }
        --worker { set ::harness(worker) $arg; incr i }
        --help - -h { usage; exit 0 }
        default {
            puts stderr "Unknown option: $opt"
            usage
            exit 2
        }
    }
}

set ::harness(redis_mode) [expr {[file tail $::harness(binary)] eq "redis-server"}]
if {$::harness(redis_mode)} {
    lappend ::harness(denytags) mooncake
    set ::harness(denywhy,mooncake) "mooncake-only, not run against redis-server"
}

cd $::harness(root)
file mkdir $::harness(tmpdir)

source [file join $::harness(testsdir) support redis.tcl]
source [file join $::harness(testsdir) support util.tcl]
source [file join $::harness(testsdir) support server.tcl]

# ---------------------------------------------------------------- worker

if {$::harness(worker) ne ""} {
    fconfigure stdout -buffering line
    set ::harness(file) $::harness(worker)
    set path [file join $::harness(testsdir) $::harness(worker)]
    if {[catch {uplevel #0 [list source $path]} err opts]} {
        if {[lindex [dict get $opts -errorcode] 0] eq "SKIP"} {
            __report__ skip $::harness(worker) $err
        } else {
            __report__ err "$::harness(worker) (error outside a test)" \
                "$err\n[__short_trace__ [dict get $opts -errorinfo]]"
        }
    }
    puts "@@counts $::num_passed $::num_failed $::num_skipped"
    exit 0
}

# ---------------------------------------------------------------- runner

proc all_test_files {} {
    set files {}
    foreach sub {unit integration} {
        foreach f [lsort [glob -nocomplain -directory [file join $::harness(testsdir) $sub] *.tcl]] {
            lappend files "$sub/[file tail $f]"
        }
    }
    return $files
}

# Run a command, passing each output line to linecb, for at most timeout
# seconds. Returns {exitcode timedout pids}; exitcode is "killed by SIG..."
# for a program that died of a signal.
proc run_with_timeout {cmd linecb timeout} {
    set chan [open |[concat $cmd [list 2>@1]] r]
    fconfigure $chan -blocking 0 -buffering line -translation auto
    set ::rwt_done 0
    set ::rwt_pids [pid $chan]
    fileevent $chan readable [list apply {{chan linecb} {
        while {[gets $chan line] >= 0} {
            {*}$linecb $line
        }
        if {[eof $chan]} { set ::rwt_done 1 }
    }} $chan $linecb]
    set timer [after [expr {$timeout * 1000}] {set ::rwt_done 2}]
    vwait ::rwt_done
    after cancel $timer
    set timedout [expr {$::rwt_done == 2}]
    if {$timedout} {
        foreach p $::rwt_pids { catch {exec kill -KILL $p} }
    }
    fileevent $chan readable {}
    fconfigure $chan -blocking 1
    set code 0
    if {[catch {close $chan} err opts]} {
        set ec [dict get $opts -errorcode]
        if {[lindex $ec 0] eq "CHILDSTATUS"} {
            set code [lindex $ec 2]
        } elseif {[lindex $ec 0] eq "CHILDKILLED"} {
            set code "killed by [lindex $ec 2]"
        }
    }
    if {$timedout} { set code "killed (timeout)" }
    return [list $code $timedout $::rwt_pids]
}

# Kill servers a dead worker left behind.
proc reap_worker_servers {wpid} {
    foreach d [glob -nocomplain -directory $::harness(tmpdir) "server.$wpid.*"] {
        set pf [file join $d pid]
        if {[file exists $pf]} {
            set f [open $pf r]
            set spid [string trim [read $f]]
            close $f
            if {[string is integer -strict $spid] && [process_is_alive $spid]} {
                puts "    killing leftover server pid $spid ($d)"
                __kill_pid__ $spid
            }
        }
    }
}

# The summary at the end repeats each failure with the first lines of its
# detail (why, not only which): CI's record of a run keeps only its tail.
set ::failed_lines {}
set ::detail_left 0
proc worker_line {line} {
    if {[regexp {^@@counts (\d+) (\d+) (\d+)$} $line -> p f s]} {
        set ::wcounts [list $p $f $s]
        return
    }
    if {[string match {    *} $line] && $::detail_left > 0} {
        incr ::detail_left -1
        set l [string range $line 0 399]
        if {[string length $line] > 400} { append l " ..." }
        lappend ::failed_lines "  $l"
    } else {
        set ::detail_left 0
    }
    if {[string match {\[err\]*} $line]} {
        lappend ::failed_lines $line
        set ::detail_left 12
    }
    if {[string match {\[ok\]*} $line]} { incr ::wseen_ok }
    if {[string match {\[err\]*} $line]} { incr ::wseen_err }
    puts $line
    flush stdout
}

proc run_test_file {file} {
    puts "=== $file"
    flush stdout
    set ::wcounts {}
    set ::wseen_ok 0
    set ::wseen_err 0
    set cmd [list [info nameofexecutable] [file join $::harness(testsdir) test_helper.tcl] \
                 --worker $file --server-binary $::harness(binary) --timeout $::harness(timeout)]
    if {[llength $::harness(allowtags)] || [llength $::harness(denytags)]} {
        set t $::harness(allowtags)
        foreach d $::harness(denytags) {
            if {$d eq "mooncake" && $::harness(redis_mode)} continue
            lappend t -$d
        }
        lappend cmd --tags $t
    }
    foreach o $::harness(only) { lappend cmd --only $o }
    if {$::harness(verbose)} { lappend cmd --verbose }
    if {$::harness(dontclean)} { lappend cmd --dont-clean }
    set t0 [clock milliseconds]
    lassign [run_with_timeout $cmd worker_line $::harness(timeout)] code timedout pids
    set secs [format %.1f [expr {([clock milliseconds] - $t0) / 1000.0}]]
    reap_worker_servers [lindex $pids 0]
    if {[llength $::wcounts] == 3} {
        lassign $::wcounts p f s
        incr ::num_passed $p
        incr ::num_failed $f
        incr ::num_skipped $s
    } else {
        # The worker died: count what it reported, plus the death.
        incr ::num_passed $::wseen_ok
        incr ::num_failed $::wseen_err
        set why [expr {$timedout ? "timed out after $::harness(timeout) s" : "worker exited with status $code before finishing"}]
        __report__ err "$file ($why)"
        lappend ::failed_lines "\[err\] $file ($why)"
    }
    verbose_puts "    ($secs s)"
    set ::file_times($file) $secs
}

# C test programs: each prints its own [ok]/[err] lines and ends with
# "N passed, N failed". They may talk to a server given by the environment:
# MC_TEST_HOST, MC_TEST_PORT, MC_TEST_UNIXSOCKET, MC_TEST_SERVER (the binary).
proc run_c_tests {} {
    set dir $::harness(ctests)
    if {![file isdirectory $dir]} {
        __report__ skip "C tests" "no directory $dir"
        return
    }
    set progs {}
    foreach f [lsort [glob -nocomplain -directory $dir test_*]] {
        if {[file isfile $f] && [file executable $f]} { lappend progs $f }
    }
    if {![llength $progs]} {
        __report__ skip "C tests" "no test_* programs in $dir"
        return
    }
    set ::env(MC_TEST_SERVER) $::harness(binary)
    # The library tests need no server, so a server that cannot start is
    # one failure (reported by start_server), not a reason to skip them.
    set ran 0
    if {[file executable $::harness(binary)]} {
        start_server {} {
            set ran 1
            set ::env(MC_TEST_HOST) [srv 0 host]
            set ::env(MC_TEST_PORT) [srv 0 port]
            set ::env(MC_TEST_UNIXSOCKET) [srv 0 unixsocket]
            run_c_programs $progs
        }
        unset -nocomplain ::env(MC_TEST_HOST) ::env(MC_TEST_PORT) ::env(MC_TEST_UNIXSOCKET)
    }
    if {!$ran} {
        run_c_programs $progs
    }
}

proc c_line {line} {
    lappend ::c_output $line
    # Quietly, everything but the passing tests and the final count.
    if {$::harness(verbose) || !([string match {\[ok\]*} $line] ||
                                 [regexp {^\s*\d+ passed, \d+ failed} $line])} {
        puts "    $line"
        flush stdout
    }
}

proc run_c_programs {progs} {
    foreach prog $progs {
        set name "C [file tail $prog]"
        puts "=== $name"
        flush stdout
        set ::c_output {}
        set t0 [clock milliseconds]
        lassign [run_with_timeout [list $prog] c_line $::harness(timeout)] code timedout
        set p {}
        set f {}
        foreach l $::c_output {
            if {[regexp {^\s*(\d+) passed, (\d+) failed} $l -> pp ff]} {
                set p $pp
                set f $ff
            }
        }
        if {$p eq ""} {
            set why [expr {$timedout ? "timed out after $::harness(timeout) s" : "exit status $code, no 'N passed, N failed' line"}]
            __report__ err "$name ($why)" [join [lrange $::c_output end-15 end] "\n"]
            lappend ::failed_lines "\[err\] $name ($why)"
            continue
        }
        incr ::num_passed $p
        incr ::num_failed $f
        set ::file_times($name) [format %.1f [expr {([clock milliseconds] - $t0) / 1000.0}]]
        if {$code ne "0" && $f == 0} {
            __report__ err "$name (exit status $code)" [join [lrange $::c_output end-15 end] "\n"]
            lappend ::failed_lines "\[err\] $name (exit status $code)"
        }
        foreach l $::c_output {
            if {[string match {\[err\]*} $l]} { lappend ::failed_lines "$l ($name)" }
        }
        puts "    $p passed, $f failed"
        flush stdout
    }
}

set files [all_test_files]
if {$::harness(list)} {
    foreach f $files { puts $f }
    exit 0
}
if {[llength $::harness(single)]} {
    foreach f $::harness(single) {
        if {$f ni $files} {
            puts stderr "No such test file: $f (have: $files)"
            exit 2
        }
    }
    set files $::harness(single)
    if {!$::harness(ctests_given)} { set ::harness(skip_ctests) 1 }
}

# ------------------------------------------------------ temporary files
#
# The run gets a temporary directory of its own, and every process it
# starts inherits it as TMPDIR: the C tests make their directories there
# (testMkdtemp), and so do the fuzz run, clang, etcd and anything else
# that honours TMPDIR. When the run ends the directory must be empty. What
# is left is a test that forgot its files, or something that would have
# stayed in /tmp after a process was killed, and it is one failure, "no
# files left in TMPDIR", naming each. Since nothing but this run writes
# there, files of other programs on the machine (another engineer's run
# included) can never be blamed on it, as a before/after look at /tmp
# would. The directory is removed afterwards, or kept with --dont-clean.
proc tmpdir_open {} {
    set base /tmp
    if {[info exists ::env(TMPDIR)] && [file isdirectory $::env(TMPDIR)]} { set base $::env(TMPDIR) }
    # Short, so that unix sockets inside still fit in sun_path.
    if {[string length $base] > 40} { set base /tmp }
    # A run that was interrupted (Ctrl-C, a closed pipe) could not remove
    # its directory; the name carries the runner's pid, so a later run
    # removes those whose runner is gone.
    foreach d [glob -nocomplain -types d -directory $base mooncake-tests.*] {
        if {[regexp {mooncake-tests\.(\d+)\.} [file tail $d] -> rpid] && ![process_is_alive $rpid]} {
            catch {file delete -force $d}
        }
    }
    set ::harness(runtmp) [exec mktemp -d [file join $base mooncake-tests.[pid].XXXXXX]]
    set ::env(TMPDIR) $::harness(runtmp)
}

proc tmpdir_close {} {
    set ::harness(file) {}
    set dir $::harness(runtmp)
    set left [lsort [glob -nocomplain -tails -directory $dir * .*]]
    set left [lsearch -all -inline -not -regexp $left {^\.\.?$}]
    if {[llength $left]} {
        set name "no files left in TMPDIR (a run's temporary files would stay in /tmp)"
        set detail "left in $dir: [join $left {, }]"
        if {!$::harness(dontclean)} { append detail " (removed; --dont-clean keeps them)" }
        __report__ err $name $detail
        lappend ::failed_lines "\[err\] $name"
    } else {
        __report__ ok "no files left in TMPDIR"
    }
    if {!$::harness(dontclean)} { catch {file delete -force $dir} }
}

tmpdir_open
fconfigure stdout -buffering line
if {$::harness(redis_mode)} {
    puts "Development mode: testing [exec $::harness(binary) --version]"
    puts "(tests tagged mooncake are skipped)"
}

set t0 [clock milliseconds]
foreach f $files {
    run_test_file $f
}
if {!$::harness(skip_ctests)} {
    set ::harness(file) {}
    if {[catch {run_c_tests} err]} {
        __report__ err "C tests (runner error)" $err
        lappend ::failed_lines "\[err\] C tests (runner error)"
    }
}
set secs [format %.1f [expr {([clock milliseconds] - $t0) / 1000.0}]]
tmpdir_close

if {[llength $::failed_lines]} {
    puts ""
    puts "Failed:"
    foreach l $::failed_lines { puts "  $l" }
}
# The slowest files, so a suite that creeps towards CI's time limit shows
# where its time goes.
set slow {}
foreach {f s} [array get ::file_times] { lappend slow [list $f $s] }
set slow [lrange [lsort -real -decreasing -index 1 $slow] 0 9]
if {[llength $slow] > 1} {
    puts ""
    puts "Slowest:"
    foreach e $slow { puts [format "  %7.1f s  %s" [lindex $e 1] [lindex $e 0]] }
}
puts ""
puts "All done in $secs s."
set summary "$::num_passed passed, $::num_failed failed"
if {$::num_skipped} { append summary ", $::num_skipped skipped" }
puts $summary
exit [expr {$::num_failed > 0 ? 1 : 0}]
