# redis.tcl -- a small RESP client for the test suite.
#
# The tests talk to the server through this client and nothing else, so it
# must be exact rather than clever: every byte the server sends is parsed by
# its type prefix (RESP2 and RESP3 alike) and nothing is cached or retried.
#
#   set c [::redis::redis 127.0.0.1 6379]      ;# blocking client
#   $c set foo bar                             ;# -> OK
#   set d [::redis::redis 127.0.0.1 6379 1]    ;# deferring client
#   $d get foo ; $d read                       ;# send now, read later
#
# Replies map to Tcl values this way:
#   +simple / $bulk / =verbatim / (bignum / ,double  -> the string (the
#                                   verbatim "txt:" prefix is dropped)
#   :integer                     -> the integer
#   *array / ~set / >push        -> a Tcl list
#   %map                         -> a flat key/value list (usable as a dict)
#   |attribute                   -> remembered ($c attributes), then the
#                                   reply that follows is returned
#   _null, $-1, *-1              -> the empty string
#   #t / #f                      -> 1 / 0
#   -error / !bulk-error         -> a Tcl error whose message is the error
#                                   text, with errorcode {REDIS <CODE>}
#
# Values are byte strings: the channel is binary, so a Tcl string whose
# characters are all below 256 is sent byte for byte and replies come back
# the same way. Connection loss raises "I/O error reading reply" with
# errorcode {REDIS EOF}.
#
# Methods besides commands: read, write BYTES, flush, close, channel,
# readraw 0|1 (return reply lines verbatim, one per read), attributes,
# deferred 0|1, blocking 0|1, lastheader (the first line of the last
# top-level reply, e.g. "$-1" or "_" for a null, "$0" for an empty string).
#
# Unix-socket connections use tests/helpers/unix_relay.py as a byte pipe,
# because Tcl 8.6 has no AF_UNIX sockets of its own.

namespace eval ::redis {
    variable nextid 0
    variable fd
    variable deferred
    variable readraw
    variable attrs
    variable lastheader
    variable relay [file join [file dirname [file dirname [file normalize [info script]]]] helpers unix_relay.py]
}

# Open a connection. With unix set, host is ignored and port is the path of
# the unix socket.
proc ::redis::redis {{host 127.0.0.1} {port 6379} {defer 0} {unix 0}} {
    variable nextid
    variable fd
    variable deferred
    variable readraw
    variable attrs
    variable relay
    if {$unix} {
        set py [expr {[file executable /usr/bin/python3] ? "/usr/bin/python3" : "python3"}]
        set chan [open |[list $py $relay $port] r+]
    } else {
        set chan [socket $host $port]
    }
    fconfigure $chan -translation binary -buffering full -blocking 1
    set id [incr nextid]
    set fd($id) $chan
    set deferred($id) $defer
    set readraw($id) 0
    set attrs($id) {}
    set lastheader($id) {}
    set cmd ::redis::handle$id
    interp alias {} $cmd {} ::redis::__dispatch__ $id
    return $cmd
}

# Encode a command as a RESP multibulk request. Exposed so tests can build
# pipelines and malformed variants by hand.
proc ::redis::format_command {args} {
    set out "*[llength $args]\r\n"
    foreach a $args {
        append out "\$[string length $a]\r\n$a\r\n"
    }
    return $out
}

proc ::redis::__dispatch__ {id method args} {
    variable fd
    variable deferred
    variable readraw
    variable attrs
    if {![info exists fd($id)]} {
        error "client $id is closed"
    }
    set chan $fd($id)
    switch -exact -- $method {
        read {
            return [::redis::__read_reply__ $id $chan]
        }
        write {
            puts -nonewline $chan [lindex $args 0]
            return
        }
        flush {
            flush $chan
            return
        }
        close {
            ::redis::__close__ $id
            return
        }
        channel {
            return $chan
        }
        readraw {
            set readraw($id) [lindex $args 0]
            return
        }
        deferred {
            set deferred($id) [lindex $args 0]
            return
        }
        blocking {
            fconfigure $chan -blocking [lindex $args 0]
            return
        }
        attributes {
            return $attrs($id)
        }
        lastheader {
            variable lastheader
            return $lastheader($id)
        }
    }
    set req [::redis::format_command $method {*}$args]
    if {[catch {puts -nonewline $chan $req; flush $chan} err]} {
        error "I/O error writing request: $err" {} {REDIS EOF}
    }
    if {$deferred($id)} return
    return [::redis::__read_reply__ $id $chan]
}

proc ::redis::__close__ {id} {
    variable fd
    variable deferred
    variable readraw
    variable attrs
    variable lastheader
    catch {close $fd($id)}
    unset -nocomplain fd($id) deferred($id) readraw($id) attrs($id) lastheader($id)
    catch {interp alias {} ::redis::handle$id {}}
}

proc ::redis::__eof__ {} {
    error "I/O error reading reply" {} {REDIS EOF}
}

proc ::redis::__line__ {chan} {
    if {[gets $chan line] < 0} {
        ::redis::__eof__
    }
    if {[string index $line end] eq "\r"} {
        set line [string range $line 0 end-1]
    } else {
        # A bare \n terminator means the server broke the protocol;
        # say so rather than silently accept it.
        error "protocol violation: line not terminated by CRLF: '$line'" {} {REDIS PROTO}
    }
    return $line
}

proc ::redis::__bulk__ {chan len} {
    set data [read $chan $len]
    if {[string length $data] != $len} ::redis::__eof__
    set crlf [read $chan 2]
    if {$crlf ne "\r\n"} {
        if {[string length $crlf] < 2} ::redis::__eof__
        error "protocol violation: bulk not followed by CRLF" {} {REDIS PROTO}
    }
    return $data
}

proc ::redis::__read_reply__ {id chan} {
    variable readraw
    variable attrs
    if {$readraw($id)} {
        return [::redis::__line__ $chan]
    }
    variable lastheader
    while 1 {
        set line [::redis::__line__ $chan]
        set lastheader($id) $line
        set type [string index $line 0]
        set rest [string range $line 1 end]
        switch -exact -- $type {
            + { return $rest }
            : { return $rest }
            ( { return $rest }
            , { return $rest }
            _ { return {} }
            # { return [expr {$rest eq "t"}] }
            - {
                set code [lindex [split $rest " "] 0]
                error $rest {} [list REDIS $code]
            }
            ! {
                set msg [::redis::__bulk__ $chan $rest]
                set code [lindex [split $msg " "] 0]
                error $msg {} [list REDIS $code]
            }
            $ {
                if {$rest < 0} { return {} }
                return [::redis::__bulk__ $chan $rest]
            }
            = {
                set v [::redis::__bulk__ $chan $rest]
                return [string range $v 4 end]
            }
            * - ~ - > {
                if {$rest < 0} { return {} }
                set l {}
                for {set i 0} {$i < $rest} {incr i} {
                    lappend l [::redis::__read_nested__ $id $chan]
                }
                return $l
            }
            % {
                set l {}
                for {set i 0} {$i < $rest * 2} {incr i} {
                    lappend l [::redis::__read_nested__ $id $chan]
                }
                return $l
            }
            | {
                set l {}
                for {set i 0} {$i < $rest * 2} {incr i} {
                    lappend l [::redis::__read_nested__ $id $chan]
                }
                set attrs($id) $l
                # The attribute decorates the reply that follows: loop.
            }
            default {
                error "protocol violation: unknown reply type '$type' in line '$line'" {} {REDIS PROTO}
            }
        }
    }
}

# An element inside an aggregate. An error element must not abort reading
# the rest of the aggregate (that would desynchronise the stream), so it is
# returned as its text instead.
proc ::redis::__read_nested__ {id chan} {
    variable lastheader
    set saved $lastheader($id)
    set rc [::redis::__read_nested_1__ $id $chan v]
    set lastheader($id) $saved
    return $v
}

proc ::redis::__read_nested_1__ {id chan vvar} {
    upvar 1 $vvar v
    if {[catch {::redis::__read_reply__ $id $chan} v opts]} {
        set ec [dict get $opts -errorcode]
        if {[lindex $ec 0] eq "REDIS" && [lindex $ec 1] ni {EOF PROTO}} {
            return 0
        }
        return -options $opts $v
    }
    return 0
}
