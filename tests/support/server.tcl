# server.tcl -- start, reach, restart and stop servers under test.
#
#   start_server {overrides {maxclients 10} tags {config}} {
#       r set foo bar                 ;# innermost server's default client
#       start_server {} {
#           r -1 get foo              ;# the outer one
#           srv 0 port                ;# facts about the inner one
#       }
#   }
#
# Every server gets its own directory tests/tmp/server.<pid>.<n>/ holding
# its config (server.conf), log (stdout, stderr), unix socket (sock) and pid
# file (pid, for the runner's cleanup if this process is killed). The server
# is started as `<binary> <dir>/server.conf` and is considered up once its
# log says "Ready to accept connections".
#
# Servers always go away when their block ends, even when the block raised
# an error: the default client sends QUIT, the process gets SIGTERM, and the
# logs are searched for sanitizer reports, which count as a failed test.
# A block whose tags are excluded does not start a server; its tests are
# reported as skipped.
#
# Options of start_server:
#   overrides    {directive value ...}  appended last, so they win
#   config_lines {line ...}             verbatim lines before the overrides
#   config_file  path                   start from this file's directives
#                                       (port, bind, dir... are replaced)
#   tags         {tag ...}              tags for the block and its tests
#   args         {arg ...}              extra command-line arguments

set ::srvstack {}
set ::srvcount 0

# -------------------------------------------------------------- lookups

# srv ?level? field: a fact about a running server. level 0 is the
# innermost, -1 the one around it, and so on. Fields: host port unixsocket
# pid dir stdout stderr config_file client binary.
proc srv {args} {
    set level 0
    if {[llength $args] == 2} {
        set level [lindex $args 0]
        set args [lrange $args 1 end]
    }
    set field [lindex $args 0]
    set id [__srv_id__ $level]
    if {![info exists ::srvinfo($id,$field)]} {
        error "srv: unknown field '$field'"
    }
    return $::srvinfo($id,$field)
}

# In a skipped block there is no server: lookups give "" and clients are a
# stand-in that answers "" to everything, so the block's own code runs
# through and every test in it is listed as skipped.
proc __skipped_client__ {args} { return {} }

proc __srv_id__ {level} {
    if {$::skip_reason ne ""} {
        return -code return {}
    }
    set idx [expr {[llength $::srvstack] - 1 + $level}]
    if {$idx < 0 || $level > 0 || [llength $::srvstack] == 0} {
        error "no server at level $level"
    }
    return [lindex $::srvstack $idx]
}

# r ?level? command args...: run a command with the default client of the
# server at level (0, the innermost, by default).
proc r {args} {
    if {$::skip_reason ne ""} { return {} }
    set level 0
    if {[string is integer -strict [lindex $args 0]]} {
        set level [lindex $args 0]
        set args [lrange $args 1 end]
    }
    set id [__srv_id__ $level]
    set c $::srvinfo($id,client)
    if {$c eq "" || [info commands $c] eq ""} {
        set c [__srv_new_client__ $id 0 0]
        set ::srvinfo($id,client) $c
    }
    $c {*}$args
}

# reconnect ?level?: replace the default client (after QUIT, RESET, KILL).
proc reconnect {{level 0}} {
    set id [__srv_id__ $level]
    catch {$::srvinfo($id,client) close}
    set ::srvinfo($id,client) [__srv_new_client__ $id 0 0]
}

proc redis_client {{level 0}} {
    if {$::skip_reason ne ""} { return __skipped_client__ }
    return [__srv_new_client__ [__srv_id__ $level] 0 0]
}

proc redis_deferring_client {{level 0}} {
    if {$::skip_reason ne ""} { return __skipped_client__ }
    return [__srv_new_client__ [__srv_id__ $level] 1 0]
}

proc redis_client_unix {{level 0} {defer 0}} {
    if {$::skip_reason ne ""} { return __skipped_client__ }
    return [__srv_new_client__ [__srv_id__ $level] $defer 1]
}

proc __srv_new_client__ {id defer unix} {
    if {$unix} {
        set c [::redis::redis {} $::srvinfo($id,unixsocket) $defer 1]
    } else {
        set c [::redis::redis $::srvinfo($id,host) $::srvinfo($id,port) $defer]
    }
    lappend ::srvinfo($id,clients) $c
    return $c
}

# Is this a real Redis (development mode)?
proc server_is_redis {} {
    return $::harness(redis_mode)
}

# --------------------------------------------------------------- ports

proc __port_free__ {port} {
    if {[catch {socket -server __never__ -myaddr 127.0.0.1 $port} s]} {
        return 0
    }
    close $s
    return 1
}

# find_available_port: a TCP port on 127.0.0.1 that nobody listens on now.
proc find_available_port {} {
    if {![info exists ::next_port]} {
        set ::next_port [expr {21000 + ([pid] % 400) * 20}]
    }
    for {set i 0} {$i < 2000} {incr i} {
        set p $::next_port
        incr ::next_port
        if {$::next_port > 29999} { set ::next_port 21000 }
        if {[__port_free__ $p]} { return $p }
    }
    error "no free TCP port found"
}

# ---------------------------------------------------------- config files

# Parse a config file into a list of {directive line} pairs, skipping
# comments and blank lines.
proc __read_config__ {path} {
    set f [open $path r]
    set out {}
    foreach line [split [read $f] "\n"] {
        set t [string trim $line]
        if {$t eq "" || [string index $t 0] eq "#"} continue
        lappend out [list [string tolower [lindex [split $t " \t"] 0]] $t]
    }
    close $f
    return $out
}

proc __quote_conf__ {v} {
    if {$v eq "" || [regexp {[\s"'\\]} $v]} {
        return "\"[string map {\\ \\\\ \" \\\"} $v]\""
    }
    return $v
}

proc __write_config__ {id} {
    set managed {port bind unixsocket dir logfile loglevel}
    set over $::srvinfo($id,overrides)
    set overnames {}
    foreach {k v} $over { lappend overnames [string tolower $k] }
    set lines {}
    lappend lines "port $::srvinfo($id,port)"
    lappend lines "bind 127.0.0.1"
    lappend lines "unixsocket [__quote_conf__ $::srvinfo($id,unixsocket)]"
    lappend lines "dir [__quote_conf__ $::srvinfo($id,dir)]"
    lappend lines "logfile [__quote_conf__ $::srvinfo($id,stdout)]"
    lappend lines "loglevel verbose"
    if {$::harness(redis_mode)} {
        # Redis persists by default and refuses DEBUG; the tests expect a
        # memory-only server that sleeps on request.
        lappend lines {save ""} {appendonly no} {enable-debug-command yes}
    }
    if {$::srvinfo($id,base_config) ne ""} {
        foreach pair [__read_config__ $::srvinfo($id,base_config)] {
            lassign $pair name line
            if {$name in $managed || $name in $overnames} continue
            lappend lines $line
        }
    }
    foreach l $::srvinfo($id,config_lines) { lappend lines $l }
    foreach {k v} $over {
        lappend lines "$k [__quote_conf__ $v]"
    }
    set f [open $::srvinfo($id,config_file) w]
    puts $f [join $lines "\n"]
    close $f
}

# ----------------------------------------------------------- processes

proc __log_tail__ {path {n 25}} {
    if {[catch {open $path r} f]} { return "(no $path)" }
    set lines [split [string trimright [read $f]] "\n"]
    close $f
    return [join [lrange $lines end-[expr {$n - 1}] end] "\n"]
}

proc __file_size__ {path} {
    if {[catch {file size $path} sz]} { return 0 }
    return $sz
}

proc __read_from__ {path offset} {
    if {[catch {open $path r} f]} { return "" }
    fconfigure $f -translation binary
    seek $f $offset
    set d [read $f]
    close $f
    return $d
}

# Start the process for server id and wait until it is ready. Returns ""
# on success or a description of the failure.
proc __spawn_server__ {id} {
    set out $::srvinfo($id,stdout)
    set err $::srvinfo($id,stderr)
    set off [__file_size__ $out]
    set cmd [list $::srvinfo($id,binary) $::srvinfo($id,config_file) {*}$::srvinfo($id,args)]
    verbose_puts "starting: $cmd"
    if {[catch {exec {*}$cmd >> $out 2>> $err &} pid]} {
        return "cannot execute $::srvinfo($id,binary): $pid"
    }
    set ::srvinfo($id,pid) $pid
    set ::srvinfo($id,dead_ok) 0
    set ::srvinfo($id,died_reported) 0
    set f [open [file join $::srvinfo($id,dir) pid] w]
    puts $f $pid
    close $f
    set deadline [expr {[clock milliseconds] + $::harness(startup_ms)}]
    while 1 {
        if {[string match "*Ready to accept connections*" [__read_from__ $out $off]]} {
            return ""
        }
        if {![process_is_alive $pid]} {
            catch {exec true}   ;# let Tcl reap it
            set ::srvinfo($id,dead_ok) 1
            return "server exited during startup"
        }
        if {[clock milliseconds] > $deadline} {
            __kill_pid__ $pid
            set ::srvinfo($id,dead_ok) 1
            return "server not ready after [expr {$::harness(startup_ms) / 1000}] s"
        }
        after 20
    }
}

# SIGTERM, wait up to 10 s, then SIGKILL. Returns 1 if TERM was enough.
proc __kill_pid__ {pid} {
    catch {exec kill -TERM $pid}
    set deadline [expr {[clock milliseconds] + 10000}]
    while {[clock milliseconds] < $deadline} {
        if {![process_is_alive $pid]} {
            catch {exec true}
            return 1
        }
        after 10
    }
    catch {exec kill -KILL $pid}
    after 50
    catch {exec true}
    return 0
}

proc __close_clients__ {id} {
    foreach c $::srvinfo($id,clients) {
        if {[info commands $c] eq ""} continue
        if {$c eq $::srvinfo($id,client)} {
            # A polite goodbye, but never wait long for it.
            catch {
                fconfigure [$c channel] -blocking 0
                $c write [::redis::format_command quit]
                $c flush
            }
        }
        catch {$c close}
    }
    set ::srvinfo($id,clients) {}
    set ::srvinfo($id,client) {}
}

# Sanitizer reports in a server's logs: a list of {logpath excerpt}.
proc __sanitizer_report__ {id} {
    set found {}
    foreach path [list $::srvinfo($id,stdout) $::srvinfo($id,stderr)] {
        if {[catch {open $path r} f]} continue
        fconfigure $f -translation binary
        set text [read $f]
        close $f
        if {[regexp -indices {AddressSanitizer|LeakSanitizer|runtime error:|ThreadSanitizer|MemorySanitizer} $text idx]} {
            set start [string last "\n" $text [lindex $idx 0]]
            set lines [split [string range $text [expr {$start + 1}] end] "\n"]
            lappend found [list $path [join [lrange $lines 0 39] "\n"]]
        }
    }
    return $found
}

# Called after each test: a server that died without being asked to is a
# failure of the test that was running.
proc __check_servers_alive__ {} {
    set msg {}
    foreach id $::srvstack {
        if {$::srvinfo($id,dead_ok) || $::srvinfo($id,died_reported)} continue
        if {![process_is_alive $::srvinfo($id,pid)]} {
            catch {exec true}
            set ::srvinfo($id,died_reported) 1
            lappend msg "server pid $::srvinfo($id,pid) (port $::srvinfo($id,port)) died; last log lines:"
            foreach l [split [__log_tail__ $::srvinfo($id,stdout)] "\n"] { lappend msg "  $l" }
            set st [__log_tail__ $::srvinfo($id,stderr) 15]
            if {[string trim $st] ne "" && ![string match "(no *" $st]} {
                lappend msg "  stderr:"
                foreach l [split $st "\n"] { lappend msg "  $l" }
            }
        }
    }
    return [join $msg "\n"]
}

# ------------------------------------------------------- start / stop

proc start_server {options code} {
    set tags {}
    set overrides {}
    set config_lines {}
    set config_file {}
    set extra_args {}
    foreach {k v} $options {
        switch -- $k {
            tags         { set tags $v }
            overrides    { set overrides $v }
            config_lines { set config_lines $v }
            config_file  { set config_file $v }
            args         { set extra_args $v }
            default      { error "start_server: unknown option '$k'" }
        }
    }

    set saved_tags $::tags
    lappend ::tags {*}$tags

    # Excluded tags (or an enclosing skipped block) skip the whole block:
    # its body runs with `test` reporting skips and without a server, and
    # anything else in it that needs a server quietly stops the body.
    set why $::skip_reason
    if {$why eq ""} { set why [__tags_skip_reason__ $::tags 0] }
    if {$why ne ""} {
        set saved_skip $::skip_reason
        set ::skip_reason $why
        catch {uplevel 1 $code}
        set ::skip_reason $saved_skip
        set ::tags $saved_tags
        return
    }

    set id [incr ::srvcount]
    set dir [file join $::harness(tmpdir) "server.[pid].$id"]
    file mkdir $dir
    array set ::srvinfo [list \
        $id,host 127.0.0.1 \
        $id,dir $dir \
        $id,unixsocket [file join $dir sock] \
        $id,stdout [file join $dir stdout] \
        $id,stderr [file join $dir stderr] \
        $id,config_file [file join $dir server.conf] \
        $id,binary $::harness(binary) \
        $id,overrides $overrides \
        $id,config_lines $config_lines \
        $id,base_config $config_file \
        $id,args $extra_args \
        $id,clients {} \
        $id,client {} \
        $id,pid 0 \
        $id,dead_ok 1 \
        $id,died_reported 0]

    # Start it; a port taken between our probe and the server's bind gets
    # another try on another port.
    set failed_before $::num_failed
    for {set attempt 0} {$attempt < 3} {incr attempt} {
        set ::srvinfo($id,port) [find_available_port]
        __write_config__ $id
        set err [__spawn_server__ $id]
        if {$err eq ""} break
        set log [__log_tail__ $::srvinfo($id,stdout)]
        if {![string match -nocase "*address already in use*" $log]} break
    }
    if {$err ne ""} {
        set detail "$err\nconfig: $::srvinfo($id,config_file)\nlast log lines:\n[__log_tail__ $::srvinfo($id,stdout)]"
        set st [__log_tail__ $::srvinfo($id,stderr) 15]
        if {[string trim $st] ne "" && ![string match "(no *" $st]} {
            append detail "\nstderr:\n$st"
        }
        __report__ err "start_server $::srvinfo($id,binary) (tags: $::tags)" $detail
        set ::tags $saved_tags
        return
    }
    verbose_puts "server pid $::srvinfo($id,pid) ready on port $::srvinfo($id,port) ($dir)"

    lappend ::srvstack $id
    set rc [catch {
        set ::srvinfo($id,client) [__srv_new_client__ $id 0 0]
        uplevel 1 $code
    } res opts]
    set ::srvstack [lrange $::srvstack 0 end-1]
    set ::tags $saved_tags

    __stop_server__ $id $failed_before
    return -options $opts $res
}

proc __stop_server__ {id failed_before} {
    __close_clients__ $id
    set pid $::srvinfo($id,pid)
    if {$pid && [process_is_alive $pid]} {
        if {![__kill_pid__ $pid]} {
            __report__ err "server pid $pid exits on SIGTERM" "it was still running 10 s after SIGTERM and was killed"
        }
    } elseif {!$::srvinfo($id,dead_ok) && !$::srvinfo($id,died_reported)} {
        __report__ err "server pid $pid was running at the end of its block" \
            "it had died; last log lines:\n[__log_tail__ $::srvinfo($id,stdout)]"
    }
    set ::srvinfo($id,dead_ok) 1
    foreach pair [__sanitizer_report__ $id] {
        lassign $pair path excerpt
        __report__ err "sanitizer errors in $path" $excerpt
    }
    if {$::num_failed == $failed_before && !$::harness(dontclean)} {
        catch {file delete -force $::srvinfo($id,dir)}
    } elseif {$::num_failed != $failed_before} {
        verbose_puts "kept $::srvinfo($id,dir) for inspection"
    }
}

# kill_server ?level?: stop a server inside its block (SIGTERM, wait). The
# block's end then has nothing left to stop.
proc kill_server {{level 0}} {
    set id [__srv_id__ $level]
    __close_clients__ $id
    set ::srvinfo($id,dead_ok) 1
    __kill_pid__ $::srvinfo($id,pid)
}

# server_exited ?level? ?timeout_ms?: wait for a server that was told to go
# away (SHUTDOWN) to exit; 1 if it did. Its death is then not a failure.
proc server_exited {{level 0} {timeout_ms 10000}} {
    set id [__srv_id__ $level]
    set deadline [expr {[clock milliseconds] + $timeout_ms}]
    while {[clock milliseconds] < $deadline} {
        if {![process_is_alive $::srvinfo($id,pid)]} {
            catch {exec true}
            set ::srvinfo($id,dead_ok) 1
            __close_clients__ $id
            return 1
        }
        after 10
    }
    return 0
}

# restart_server ?level? ?how?: stop the server (how: term, the default,
# SIGTERM and wait; kill, kill -9 as a crash does) and start the same binary
# again with the same config file (which CONFIG REWRITE may have changed)
# and so the same port, then reconnect the default client.
proc restart_server {{level 0} {how term}} {
    set id [__srv_id__ $level]
    __close_clients__ $id
    set ::srvinfo($id,dead_ok) 1
    if {[process_is_alive $::srvinfo($id,pid)]} {
        if {$how eq "kill"} {
            set pid $::srvinfo($id,pid)
            exec kill -9 $pid
            # The leader shows Z while its other threads are still exiting
            # and holding the descriptors they share (the listeners): wait
            # until it is the only task left.
            while {[process_is_alive $pid] || [llength [glob -nocomplain /proc/$pid/task/*]] > 1} { after 5 }
            catch {exec true}
        } else {
            __kill_pid__ $::srvinfo($id,pid)
        }
    }
    # The rewritten file decides the port now.
    foreach pair [__read_config__ $::srvinfo($id,config_file)] {
        lassign $pair name line
        if {$name eq "port"} { set ::srvinfo($id,port) [lindex $line 1] }
    }
    # The port was free while the server was down: another test's server
    # may have taken it. Then the restart moves to a new port, as
    # start_server's first start does.
    for {set attempt 0} {1} {incr attempt} {
        set off [__file_size__ $::srvinfo($id,stdout)]
        set err [__spawn_server__ $id]
        if {$err eq "" || $attempt == 2} break
        if {![string match -nocase "*address already in use*" [__read_from__ $::srvinfo($id,stdout) $off]]} break
        set ::srvinfo($id,port) [find_available_port]
        __set_config_port__ $::srvinfo($id,config_file) $::srvinfo($id,port)
    }
    if {$err ne ""} {
        error "restart_server: $err\n[__log_tail__ $::srvinfo($id,stdout)]"
    }
    set ::srvinfo($id,client) [__srv_new_client__ $id 0 0]
}

# The config file's port line, replaced (a restart that moves).
proc __set_config_port__ {path port} {
    set f [open $path r]
    set lines [split [read $f] "\n"]
    close $f
    set out {}
    foreach l $lines {
        if {[regexp {^\s*port\s} $l]} { set l "port $port" }
        lappend out $l
    }
    set f [open $path w]
    puts -nonewline $f [join $out "\n"]
    close $f
}

# wait_for_log_messages ?level? pattern ?maxtries? ?delay?: wait until a line
# of the server's log matches the glob pattern.
proc wait_for_log_messages {level pattern {maxtries 100} {delay 50}} {
    set path [srv $level stdout]
    for {set i 0} {$i < $maxtries} {incr i} {
        foreach line [split [__read_from__ $path 0] "\n"] {
            if {[string match $pattern $line]} return
        }
        after $delay
    }
    fail "no log line matching '$pattern' in $path"
}

# run_server_expecting_exit arg ...: start the server binary with these
# arguments (a config file, --directives) outside start_server, for tests of
# start-up failures; returns {exited output} where exited is 1 if it exited
# within 5 s (it is killed otherwise) and output is its stdout and stderr.
proc run_server_expecting_exit {args} {
    set out [tmpfile server-exit.out]
    set pid [exec $::harness(binary) {*}$args >& $out &]
    set deadline [expr {[clock milliseconds] + 5000}]
    set exited 0
    while {[clock milliseconds] < $deadline} {
        if {![process_is_alive $pid]} { set exited 1; break }
        after 20
    }
    if {!$exited} { catch {exec kill -9 $pid} }
    catch {exec true}
    set f [open $out r]
    set text [read $f]
    close $f
    file delete $out
    return [list $exited $text]
}

# run_conf_expecting_exit text: run_server_expecting_exit on a config file
# holding text (removed afterwards); returns {exited output path}.
proc run_conf_expecting_exit {text} {
    set conf [tmpfile bad.conf]
    set f [open $conf w]
    puts $f $text
    close $f
    lassign [run_server_expecting_exit $conf] exited out
    file delete $conf
    return [list $exited $out $conf]
}
