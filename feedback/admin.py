from django.contrib import admin

from feedback.models import FeedbackAggregate
from rms.admin import ReadOnlyAdmin


@admin.register(FeedbackAggregate)
class FeedbackAggregateAdmin(ReadOnlyAdmin):
    list_display = ("object", "total_injections", "usage_ratio", "unused_streak", "utility")
    list_filter = ("namespace",)
