# The layout holds: the server and libmooncake are rooms of their own (no
# object of one links an object of the other, no source of one includes the
# other's headers, except the two leaf modules they share), and the README's
# tour names every folder and source file. The checks are
# tests/helpers/layout_check.py's, run on the objects this run built; each is
# shown to fail on a dependency made to cross.

set ::layout_check [file join $::harness(testsdir) helpers layout_check.py]
set ::layout_src [file join $::harness(root) src]

proc layout_run {args} {
    set rc [catch {exec /usr/bin/python3 $::layout_check {*}$args 2>@1} out]
    return [list $rc $out]
}

# An object, compiled here, that calls the function named; the suite's own
# scratch directory, removed with the file.
proc layout_object {name fn} {
    set dir [tmpfile layout]
    file mkdir $dir
    set c [file join $dir $name.c]
    set fd [open $c w]
    puts $fd "void ${fn}(void);\nvoid layout_probe_${name}(void) { ${fn}(); }"
    close $fd
    exec cc -c -fPIC -o [file join $dir $name.o] $c
    return [list $dir [file join $dir $name.o]]
}

tags {layout} {
    test {The server and libmooncake link nothing of each other, and include nothing of each other} {
        lassign [layout_run] rc out
        assert_equal 0 $rc $out
        assert_match "*server objects, * library objects, 0 violations*" $out
    }

    test {A library object that calls into the server is caught, naming the symbol} {
        lassign [layout_object lib_calls_server serverLog] dir obj
        lassign [layout_run --extra-lib-object $obj] rc out
        file delete -force $dir
        assert_equal 1 $rc
        assert_match "*libmooncake needs serverLog, which only the server defines*" $out
    }

    test {A server object that calls into the library is caught, naming the symbol} {
        lassign [layout_object server_calls_lib mc_connect] dir obj
        lassign [layout_run --extra-server-object $obj] rc out
        file delete -force $dir
        assert_equal 1 $rc
        assert_match "*the server needs mc_connect, which only libmooncake defines*" $out
    }

    test {What both rooms share (anet, crc) is compiled into each, not reached across} {
        lassign [layout_object uses_anet anetTcpConnect] dir obj
        # the library defines its own anetTcpConnect: no violation either way
        lassign [layout_run --extra-lib-object $obj --extra-server-object $obj] rc out
        file delete -force $dir
        assert_equal 0 $rc $out
    }

    test {The README's tour names every folder, every C source and every utility} {
        lassign [layout_run --tour [file join $::harness(root) README.md]] rc out
        assert_equal 0 $rc $out
        assert_match "*tour: 0 missing*" $out
    }

    test {A README whose tour lacks a source file's line is caught} {
        set fd [open [file join $::harness(root) README.md]]
        set text [read $fd]
        close $fd
        set readme [tmpfile layout-readme]
        set fd [open $readme w]
        puts -nonewline $fd [regsub -all -line {^\| `src/relay\.c` \|.*$} $text {}]
        close $fd
        lassign [layout_run --tour $readme $::harness(root)] rc out
        file delete -force $readme
        assert_equal 1 $rc
        assert_match "*the README's tour does not name relay.c*" $out
    }
}
